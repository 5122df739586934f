"""Small-batch matmul kernels on the GPU: cuBLAS (`F.linear`) against `skinny_matmul` in each of its block
configurations, for Qwen3-0.6B's, -8B's and -30B-A3B's weight shapes; prints a table
and the best configuration per shape (what `nvllm.ops.skinny_matmul.CONFIGS` holds). With `--gated`, the
MLP's gate/up projections with their activation (`GATED_CONFIGS`): cuBLAS, or the plain skinny matmul in
the table's configuration, then the activation's kernel, against the skinny matmul with the activation in
its epilogue. Each time is one call inside a CUDA graph of 20 calls, replayed 10 times, each call after a
read of a buffer larger than the L2 cache (the read's own time taken off): in a model's step every weight
is read once, with the other layers' in between, so a weight never is in the L2 when its matmul starts.

With `--fp8`, the weights in float8 with a scale per row (`model.quantization=fp8`): `torch._scaled_mm`
(activations quantized per token) against the skinny kernel on the fp8 weight; `--move-bits` has the kernel
convert the weight by moving bits (`nvllm.ops.e4m3_to_bf16`) instead of Triton's conversion.

`--wide` sweeps a larger grid (longer K slices, 8 warps, 2 to 6 stages) over the decoder layers' shapes,
for shapes where no configuration of the table's grid reaches the memory's bandwidth; `--model` keeps one
model's shapes.

`--splits 2,4,8` sweeps the same grid with each program's reduction split over that many programs a strip
(`nvllm.ops.skinny_matmul.SPLIT_K`, for narrow weights whose strips leave SMs idle), and prints the split and
its configuration to paste where one beats the table's unsplit configuration.

`--fma` sweeps the kernel on the CUDA cores (`nvllm.ops.skinny_matmul.fma_matmul`, `FMA_GRID`) at one and
two rows (a single stream's graph: a row and its padding) against the table's configuration and split, and
prints `FMA_CONFIGS` lines to paste where it is faster (a MoE router's weight stays bf16 under `--fp8`).

A sweep compiles dozens of kernels, a few seconds each; `--jobs N` compiles them in N processes first
(Triton keeps them in its disk cache, so the timing pass only loads them), and `--compile-only` stops there.

`python -m experiments.kernels.skinny_matmul_bench [--gated] [--fp8 [--move-bits]] [--wide] [--model M]
[--splits S,...] [--fma] [--jobs N] [--compile-only]`"""

from __future__ import annotations

import argparse
import functools
import itertools
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import torch
import torch.nn.functional as F
import triton

from experiments.kernels.fp8_arguments import add_fp8_arguments, convert_as_asked
from nvllm.ops import e4m3_to_bf16
from nvllm.ops.fp8 import quantize_rows, scaled_mm_linear
from nvllm.ops.skinny_matmul import SPLIT_K, fma_matmul, skinny_config, skinny_matmul

SHAPES = {  # (out, in) of qkv, o, gate_up, down, LM head; a MoE model's qkv, o, router, LM head
    "qwen3-0.6b": [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (151936, 1024)],
    "qwen3-8b": [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288), (151936, 4096)],
    "qwen3-30b-a3b": [(5120, 2048), (2048, 4096), (128, 2048), (151936, 2048)],
}
DENSE_MODELS = ("qwen3-0.6b", "qwen3-8b")  # a gate/up projection third in their shapes
# a MoE router's weight stays in the model's dtype when the rest is fp8 (`nvllm.layers.fused_moe`)
ROUTERS = {(128, 2048)}
ROWS = (1, 2, 8, 16)
CONFIGS = list(itertools.product((16, 32, 64), (128, 256, 512), (4,), (3, 4, 5)))
# 128 columns a strip: with `--splits`, a weight's programs can come to about one an SM (Qwen3-30B-A3B's
# q/k/v: 160 strips of 32 on 132 SMs leave 28 SMs two programs each, the kernel as long as two)
WIDE_CONFIGS = list(itertools.product((16, 32, 64, 128), (256, 512, 1024), (4, 8), (2, 3, 4, 6)))
# the gated kernel reads two strips a program, so its blocks top out at half the plain kernel's bytes a step
GATED_CONFIGS = list(itertools.product((16, 32), (128, 256), (4,), (3, 4, 5)))
# on the CUDA cores a program's products are a [2, BLOCK_N, BLOCK_K] fp32 tile: at most 64 registers a thread
FMA_GRID = [
    config
    for config in itertools.product((2, 4, 8, 16), (256, 512, 1024, 2048, 4096), (4, 8), (1,))
    if 2 * config[0] * config[1] <= 64 * 32 * config[2]
]
FMA_ROWS = (1, 2)


def graph_time_us(fn, calls: int = 20, replays: int = 10) -> float:
    """One call of `fn`, in a CUDA graph of `calls` calls replayed `replays` times."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (calls * replays)


@functools.cache
def l2_evicting_read() -> Callable[[], torch.Tensor]:
    """A read of 256 MiB (five times the H200's L2): what it leaves in the L2 is none of the next kernel's
    inputs."""
    buffer = torch.ones(2**27, device="cuda", dtype=torch.bfloat16)
    return buffer.sum


@functools.cache
def eviction_us() -> float:
    """The evicting read's own time, taken off each timed call."""
    return graph_time_us(l2_evicting_read())


def time_us(fn, cold_l2: bool = True) -> float:
    """µs per call of `fn`; `cold_l2`: its inputs read from memory, not from the L2 cache."""
    if not cold_l2:
        return graph_time_us(fn)
    evict = l2_evicting_read()
    return graph_time_us(lambda: (evict(), fn())) - eviction_us()


def fastest(run: Callable, configs, xs) -> tuple[float, tuple, dict[int, float]]:
    """The configuration with the least time summed over `ROWS` of `run(x, config=...)`: (that sum, it, its
    time per row count)."""
    timed = []
    for config in configs:
        try:
            times = {m: time_us(partial(run, xs[m], config=config)) for m in ROWS}
        except triton.runtime.errors.OutOfResources:  # too large a tile for shared memory
            continue
        timed.append((sum(times.values()), config, times))
    return min(timed)


def best_configs(
    fp8: bool, configs: list, shapes: dict[str, list], splits: tuple[int, ...] = (1,)
) -> dict[tuple[int, int], tuple[tuple[int, int, int, int], int, float, float, float]]:
    """Per shape of `shapes`: the one of `configs` and `splits` (programs a strip) with the least time
    summed over `ROWS`, its time, cuBLAS' and the engine's table's configuration's unsplit (µs); `fp8`: the
    weight in fp8, and `torch._scaled_mm` in cuBLAS' place."""
    torch.manual_seed(0)
    best = {}
    for model, model_shapes in shapes.items():
        for n, k in model_shapes:
            weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            xs = {m: torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for m in ROWS}
            if fp8:
                weight, scale = quantize_rows(weight)
                cublas = {m: time_us(partial(scaled_mm_linear, xs[m], weight, scale)) for m in ROWS}
                run = partial(skinny_matmul, weight=weight, weight_scale=scale)
            else:
                cublas = {m: time_us(partial(F.linear, xs[m], weight)) for m in ROWS}
                run = partial(skinny_matmul, weight=weight)
            total, config, times, split = min(
                (*fastest(partial(run, split_k=split), configs, xs), split) for split in splits
            )
            table = skinny_config(n, k, weight_bytes=weight.element_size())
            table_total = sum(time_us(partial(run, xs[m], config=table, split_k=1)) for m in ROWS)
            gb = n * k * weight.element_size() / 1e9
            print(
                f"{model} {n}x{k} ({gb * 1e3:.1f} MB): "
                + " ".join(f"M={m} cublas {cublas[m]:.1f}us skinny {times[m]:.1f}us" for m in ROWS)
                + f" | best {config}, split {split} = {gb / times[1] * 1e6 / 1e3:.2f} TB/s at M=1"
                + f" | the table's {table}: {table_total:.1f} us over M={ROWS}",
                flush=True,
            )
            best[(n, k)] = (config, split, total, sum(cublas.values()), table_total)
    return best


def fma_configs(fp8: bool, shapes: dict[str, list]) -> None:
    """Per shape: the fastest of `FMA_GRID` on the CUDA cores summed over `FMA_ROWS`, against the table's
    configuration and split on tensor cores; an `FMA_CONFIGS` line, commented out where it is not faster."""
    torch.manual_seed(0)
    for model, model_shapes in shapes.items():
        for n, k in model_shapes:
            weight, scale = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5, None
            if fp8 and (n, k) not in ROUTERS:
                weight, scale = quantize_rows(weight)
            xs = {m: torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for m in FMA_ROWS}
            table = skinny_config(n, k, weight_bytes=weight.element_size())
            key = (n, k, weight.element_size())
            # a split given: the tensor-core kernel, whatever `FMA_CONFIGS` holds
            split = SPLIT_K.get(key, 1)
            run = partial(skinny_matmul, weight=weight, config=table, weight_scale=scale, split_k=split)
            tensor_cores = sum(time_us(partial(run, xs[m])) for m in xs)
            timed = []
            for config in FMA_GRID:
                if config[1] > triton.next_power_of_2(k):
                    continue
                run = partial(fma_matmul, weight=weight, config=config, weight_scale=scale)
                timed.append((sum(time_us(partial(run, xs[m])) for m in xs), config))
            cuda_cores, config = min(timed)
            paste = "" if cuda_cores < tensor_cores else "# "
            print(
                f"{paste}FMA_CONFIGS[{key}] = {config}  # {model}: {cuda_cores:.1f} us over M={FMA_ROWS}, "
                f"tensor cores {table} {tensor_cores:.1f}",
                flush=True,
            )


def activated(matmul: Callable, x) -> torch.Tensor:
    """The unfused gate/up projection: the matmul, then the activation's kernel."""
    from nvllm.ops.silu_and_mul import silu_and_mul

    return silu_and_mul(matmul(x))


def gated_projections() -> None:
    """µs per call of the gate/up projection and its activation: cuBLAS then the activation's kernel, the
    plain skinny matmul in the table's configuration then the activation's kernel, and the skinny matmul
    with the activation in its epilogue in each configuration."""
    torch.manual_seed(0)
    for model in DENSE_MODELS:
        n, k = SHAPES[model][2]
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        xs = {m: torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for m in ROWS}
        cublas = {m: time_us(partial(activated, partial(F.linear, weight=weight), xs[m])) for m in ROWS}
        plain_matmul = partial(skinny_matmul, weight=weight, config=skinny_config(n, k))
        plain = {m: time_us(partial(activated, plain_matmul, xs[m])) for m in ROWS}
        run = partial(skinny_matmul, weight=weight, gated=True)
        total, config, fused = fastest(run, GATED_CONFIGS, xs)
        print(
            f"{model} gate_up {n}x{k}: "
            + " ".join(
                f"M={m} cublas+act {cublas[m]:.1f}us skinny+act {plain[m]:.1f}us fused {fused[m]:.1f}us"
                for m in ROWS
            )
            + f" | best fused {config}",
            flush=True,
        )
        print(f"{(n, k)}: {config},  # {total:.1f} vs skinny+act {sum(plain.values()):.1f} us over M={ROWS}")


def compile_one(trial: tuple[tuple[int, int, int, int], int, bool, bool, bool, int]) -> None:
    """Compiles the kernel for `(config, rows, gated, fp8, move_bits, split)`, the specialization the timing
    pass will ask for: the sweeps' shapes differ only in sizes Triton does not specialize on (all are
    multiples of 16)."""
    config, rows, gated, fp8, move_bits, split = trial
    e4m3_to_bf16.ENABLED = move_bits
    weight = torch.zeros(512, 1024, device="cuda", dtype=torch.bfloat16)
    scale = None
    if fp8:
        weight, scale = quantize_rows(weight)
    x = torch.zeros(rows, 1024, device="cuda", dtype=torch.bfloat16)
    try:
        skinny_matmul(x, weight, config=config, gated=gated, weight_scale=scale, split_k=split)
    except triton.runtime.errors.OutOfResources:
        pass


def compile_all(configs: list, gated: bool, fp8: bool, jobs: int, splits: tuple[int, ...] = (1,)) -> None:
    """`compile_one` over every `(config, rows, split)` of a sweep, in `jobs` processes."""
    # by its name, so the workers can find `compile_one`
    import experiments.kernels.skinny_matmul_bench as bench

    enabled = e4m3_to_bf16.ENABLED
    trials = [(c, m, gated, fp8, enabled, split) for c in configs for m in ROWS for split in splits]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(bench.compile_one, trials))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gated", action="store_true", help="the gate/up projections with their activation")
    add_fp8_arguments(parser, "weights (not with --gated)")
    parser.add_argument("--wide", action="store_true", help="the larger grid, the decoder layers' shapes")
    parser.add_argument("--model", choices=sorted(SHAPES), help="one model's shapes (default: both)")
    parser.add_argument(
        "--splits",
        type=lambda text: tuple(int(split) for split in text.split(",")),
        default=(1,),
        help="programs a strip to sweep beside one (comma-separated; not with --gated)",
    )
    parser.add_argument("--fma", action="store_true", help="the kernel on the CUDA cores at one and two rows")
    parser.add_argument("--jobs", type=int, default=0, help="compile the kernels in N processes first")
    parser.add_argument("--compile-only", action="store_true", help="only compile (with --jobs)")
    args = parser.parse_args()
    if args.gated and (args.fp8 or args.wide or args.model or args.splits != (1,)):
        parser.error(
            "--gated sweeps its own grid on bf16 weights of both models (no --fp8, --wide, --model, --splits)"
        )
    splits = tuple(sorted({1, *args.splits}))
    convert_as_asked(parser, args)
    configs = GATED_CONFIGS if args.gated else WIDE_CONFIGS if args.wide else CONFIGS
    models = [args.model] if args.model else list(SHAPES)
    # the wide grid: the decoder layers' shapes, without the LM head (the last)
    shapes = {model: SHAPES[model][:-1] if args.wide else SHAPES[model] for model in models}
    if args.fma:
        fma_configs(args.fp8, shapes)
        raise SystemExit
    if args.fp8:
        shapes = {model: [s for s in listed if s not in ROUTERS] for model, listed in shapes.items()}
    if args.jobs:
        compile_all(configs, args.gated, args.fp8, args.jobs, splits)
    if args.gated and not args.compile_only:
        gated_projections()
    elif not args.compile_only:
        table = "FP8_CONFIGS" if args.fp8 else "CONFIGS"
        weight_bytes = 1 if args.fp8 else 2
        for shape, (config, split, skinny_us, cublas_us, table_us) in best_configs(
            args.fp8, configs, shapes, splits
        ).items():
            # lines to paste where the sweep beat the table; comments where it did not
            paste = "" if skinny_us < table_us else "# "
            print(
                f"{paste}{table}[{shape}] = {config}  # {skinny_us:.1f} vs the table's {table_us:.1f}, "
                f"cuBLAS {cublas_us:.1f} us over M={ROWS}"
            )
            if split > 1:
                print(f"{paste}SPLIT_K[{(*shape, weight_bytes)}] = {split}")
