"""Launch shapes of the MoE grouped matmuls (`nvllm.ops.moe_tiles.TILE_CONFIGS`) for one layer of
Qwen3-30B-A3B (`experiments.kernels.moe_bench`'s shape and routing: uniform random logits through
`route`), on the GPU. For each token count, gate/up and down are timed separately (`time_us`: one call in a
CUDA graph, inputs read from memory) at `row_tile`'s row tile over a grid of block_n (16, 32, 64, 128) x
block_k (64, 128, 256) x num_warps (2, 4, 8) x num_stages (2, 3, 4, 5), 144 configurations. Printed per
token count and matmul: the fastest configuration, its µs, the bytes of the experts the batch touches
(gate/up 2*I*H*2 each, down H*I*2) and TB/s, and the table's configuration's µs beside it; at the end, a
`TILE_CONFIGS` to paste, each band's configuration per matmul the one with the least time summed over the
band's token counts.

The grid is pruned (`in_grid`): no configuration whose pipeline buffers cannot fit in shared memory, none
with more stages than its reduction loop has slices, and at tiles of 32 rows and more (prefill, compute
bound) no 16-column strip and no 2 warps. Over the 12 default token counts that leaves about 2,600
timings (129 gate/up and 120 down configurations at each of the nine token counts up to 256, about 60 each
at 512, 2048 and 8192) and about 730 kernels to compile (the 16-row tiles twice: one token's 8 pairs are no
multiple of 16, which Triton specializes on). `--jobs N` (default: up to 16, and no more than the GPU's free
memory holds, each process with a layer of experts) compiles them in N processes first (Triton keeps them in
its disk cache); estimated, not measured: about a minute of compiling on 16 cores and two of timing on an
H200.

`--fp8` sweeps the experts in fp8 with a scale per row (`model.quantization=fp8`) and prints
`FP8_TILE_CONFIGS`; `--move-bits` has the kernels convert them by moving bits (`nvllm.ops.e4m3_to_bf16`),
gate/up reads its input as fp16 rows as the engine's does (`nvllm.ops.moe_triton.GATE_UP_IN_FP16`), or as
it is with `--gate-up-bf16`; down reads fp16 rows with `--down-fp16` (`DOWN_IN_FP16`).
`--fp8-activations` sweeps the fp8 experts' matmuls on fp8 activations (`nvllm.ops.moe_fp8_triton`) over
their own grid (`grid`: gate/up's block_n is one, two or four of the intermediate's quantization groups, 72
configurations). With the intermediate a scale a row, as the engine quantizes it
(`moe_tiles.FP8_INTERMEDIATE_PER_ROW`; `--intermediate-per-row` says so whatever the default), down's
block_k is free (`PER_ROW_DOWN_GRID`, 54) and the table printed is `FP8_ACTIVATION_TILE_CONFIGS`;
`--intermediate-group N` quantizes it in groups of N columns instead (`FP8_INTERMEDIATE_GROUP`), down's
block_k the group (24), and prints `FP8_ACTIVATION_GROUP_TILE_CONFIGS`.
`--pairs-fp32` has down write each pair's output in fp32, not bf16
(`moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE` off).
`--row-tile N` sweeps every token count at N-row tiles instead of `row_tile`'s (16 to 128; the engine's
reach 128 only on fp8 activations): two runs that differ in it say whether a band's row tile is the right
one (the table printed is then for that tile, to paste with the row tiles that go with it).

`python -m experiments.kernels.moe_tile_sweep [--tokens 1,8,64,256] [--jobs N] [--fp8 [--move-bits]
[--gate-up-bf16] [--down-fp16] | --fp8 --fp8-activations [--intermediate-group N | --intermediate-per-row]]
[--pairs-fp32] [--row-tile 32]`"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import torch
import triton

from experiments.kernels.fp8_arguments import add_fp8_arguments, convert_as_asked
from experiments.kernels.moe_bench import (
    HIDDEN,
    INTERMEDIATE,
    NUM_EXPERTS,
    TOP_K,
    expert_bytes,
    layer_experts,
    routed_batch,
)
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import e4m3_to_bf16, moe_fp8_triton, moe_tiles, moe_triton
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_fp8_triton import grouped_fp8_matmul
from nvllm.ops.moe_tiles import (
    FP8_TILE_CONFIGS,
    TILE_CONFIGS,
    GroupedMatmulConfig,
    config_band,
    fp8_activation_config,
    matmul_config,
    row_tile,
)
from nvllm.ops.moe_triton import grouped_matmul, matmul_input

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048, 8192)
GRID = [
    GroupedMatmulConfig(*launch)
    for launch in itertools.product((16, 32, 64, 128), (64, 128, 256), (2, 4, 8), (2, 3, 4, 5))
]
PER_ROW_DOWN_GRID = [
    GroupedMatmulConfig(*launch)
    for launch in itertools.product((64, 128, 256), (64, 128, 256), (4, 8), (2, 3, 4))
]
MATMULS = {"gate/up": True, "down": False}  # name: gated
BF16_BYTES = 2
# what a sweep multiplies (the experts' dtype, and fp8 activations or not): the table it prints
KINDS = ("bf16", "fp8", "fp8 activations")


def engine_table(kind: str) -> tuple[str, tuple]:
    """The name and the table of launch shapes the engine reads for `kind` now (on fp8 activations, the one
    for the intermediate's quantization, `moe_tiles.fp8_activation_table`)."""
    if kind == "fp8 activations":
        return moe_tiles.fp8_activation_table()
    return ("FP8_TILE_CONFIGS", FP8_TILE_CONFIGS) if kind == "fp8" else ("TILE_CONFIGS", TILE_CONFIGS)


def grid(kind: str, gated: bool) -> list[GroupedMatmulConfig]:
    """The configurations swept for the gate/up (`gated`) or down matmul of `kind`. On fp8 activations
    gate/up's block_n is one, two or four of the intermediate's quantization groups (its epilogue quantizes
    each group), and down's block_k is the group; with the intermediate a scale a row
    (`moe_tiles.FP8_INTERMEDIATE_PER_ROW`) down's block_k is free (`PER_ROW_DOWN_GRID`)."""
    if kind != "fp8 activations":
        return GRID
    group = moe_tiles.FP8_INTERMEDIATE_GROUP
    if gated:
        launches = itertools.product((1, 2, 4), (64, 128, 256), (4, 8), (2, 3, 4, 5))
        return [GroupedMatmulConfig(groups * group, *launch) for groups, *launch in launches]
    if moe_tiles.FP8_INTERMEDIATE_PER_ROW:
        return PER_ROW_DOWN_GRID
    launches = itertools.product((64, 128, 256), (4, 8), (2, 3, 4, 5))
    return [GroupedMatmulConfig(block_n, group, warps, stages) for block_n, warps, stages in launches]


def table_config(num_pairs: int, gated: bool, kind: str) -> GroupedMatmulConfig:
    """The configuration the engine launches now at `num_pairs` pairs."""
    if kind == "fp8 activations":
        return fp8_activation_config(num_pairs, NUM_EXPERTS, gated)
    return matmul_config(num_pairs, NUM_EXPERTS, gated, kind == "fp8")


def in_grid(
    config: GroupedMatmulConfig, block_m: int, gated: bool, shared_memory: int, kind: str = "bf16"
) -> bool:
    """Whether the sweep times `config` at `block_m`-row tiles: not where even num_stages - 1 buffers of a
    slice's tiles (activations and weights of `kind`) overflow `shared_memory` (it would raise
    OutOfResources), nor with more stages than the reduction loop has slices (nothing left to prefetch), nor,
    at 32 rows and more, with a 16-column strip (each program reads its rows of the input again for a
    sliver of the output) or 2 warps."""
    weight_bytes = BF16_BYTES if kind == "bf16" else 1
    activation_bytes = 1 if kind == "fp8 activations" else BF16_BYTES
    weight_rows = (2 if gated else 1) * config.block_n
    slice_bytes = (block_m * activation_bytes + weight_rows * weight_bytes) * config.block_k
    reduction = HIDDEN if gated else INTERMEDIATE
    if (config.num_stages - 1) * slice_bytes > shared_memory:
        return False
    if config.num_stages > triton.cdiv(reduction, config.block_k):
        return False
    return block_m < 32 or (config.block_n > 16 and config.num_warps > 2)


@functools.cache
def shared_memory() -> int:
    """The shared memory a program may have on this GPU, as Triton checks it."""
    return triton.runtime.driver.active.utils.get_device_properties(0)["max_shared_mem"]


@functools.cache
def experts(fp8: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    torch.manual_seed(0)
    return layer_experts(fp8)


def tile_rows(tokens: int, forced: int | None, kind: str) -> int:
    """The row tile a batch of `tokens` tokens is swept at: `forced` where given, else `row_tile`'s."""
    return forced or row_tile(tokens * TOP_K, NUM_EXPERTS, kind == "fp8 activations")


def fp8_activation_matmul(
    gated: bool, x: torch.Tensor, tiles: dict, fp8_experts: tuple[torch.Tensor, ...]
) -> Callable:
    """The gate/up (`gated`) or down matmul on fp8 activations of the tokens `x` sorted into `tiles`: the
    gate/up input quantized as the engine's, the down input random e4m3 with random scales, a group's or,
    where `moe_tiles.FP8_INTERMEDIATE_PER_ROW`, a row's (gate/up then writes bf16)."""
    gate_up, down, gate_up_scale, down_scale = fp8_experts
    slots = tiles["sorted_pairs"].numel()
    groups = triton.cdiv(INTERMEDIATE, moe_tiles.FP8_INTERMEDIATE_GROUP)
    activated = torch.randn(slots, INTERMEDIATE, device="cuda").to(gate_up.dtype)
    activated_scale = torch.rand(groups, slots, device="cuda") / 448
    per_row = moe_tiles.FP8_INTERMEDIATE_PER_ROW
    if per_row:
        activated_scale = activated_scale[0].contiguous()
    if gated:
        out = activated.to(torch.bfloat16) if per_row else activated
        out_scale = None if per_row else activated_scale
        operands = (*moe_fp8_triton.quantize_tokens(x), gate_up, gate_up_scale, out, out_scale)
    else:
        out = torch.empty(
            x.shape[0] * TOP_K, HIDDEN, device="cuda", dtype=moe_tiles.pair_output_dtype(torch.bfloat16)
        )
        operands = (activated, activated_scale, down, down_scale, out, None)
    return functools.partial(grouped_fp8_matmul, *operands, **tiles, top_k=TOP_K)


def matmul_of_batch(
    tokens: int, gated: bool, kind: str, forced_tile: int | None = None
) -> tuple[Callable, int, int]:
    """The gate/up (`gated`) or down grouped matmul of a routed batch of `tokens` tokens (experts and
    activations of `kind`), to be called with its `config`; the batch's row tile (`forced_tile` where
    given) and the number of experts it touches."""
    gate_up, down, gate_up_scale, down_scale = experts(kind != "bf16")
    x, _, weights, ids = routed_batch(tokens)
    num_pairs = tokens * TOP_K
    block_m = tile_rows(tokens, forced_tile, kind)
    sorted_pairs, tile_expert = align_by_expert(ids, NUM_EXPERTS, block_m)
    pair_weights = weights.flatten().contiguous()
    tiles = dict(
        sorted_pairs=sorted_pairs, tile_expert=tile_expert, pair_weights=pair_weights, block_m=block_m
    )
    touched = ids.unique().numel()
    if kind == "fp8 activations":
        fp8_experts = (gate_up, down, gate_up_scale, down_scale)
        return fp8_activation_matmul(gated, x, tiles, fp8_experts), block_m, touched
    activated = torch.randn(num_pairs, INTERMEDIATE, device="cuda", dtype=torch.bfloat16)
    if gated:
        operands = dict(a=x, w=gate_up, w_scale=gate_up_scale, out=activated, divisor=TOP_K, gated=True)
        operands.update(weighted=False)
        # as the engine's op reads them
        operands["a"], operands["a_scale"] = matmul_input(x, kind == "fp8", moe_triton.GATE_UP_IN_FP16)
    else:
        out = torch.empty(num_pairs, HIDDEN, device="cuda", dtype=moe_tiles.pair_output_dtype(torch.bfloat16))
        operands = dict(a=activated, w=down, w_scale=down_scale, out=out, divisor=1, gated=False)
        operands.update(weighted=True)
        operands["a"], operands["a_scale"] = matmul_input(activated, kind == "fp8", moe_triton.DOWN_IN_FP16)
    run = functools.partial(grouped_matmul, **operands, **tiles)
    return run, block_m, touched


def compile_one(
    trial: tuple[int, bool, str, tuple[bool | int, ...], GroupedMatmulConfig, int | None],
) -> None:
    """Compiles the kernel that the timing pass will ask for at `(tokens, gated, kind, switches, config,
    forced_tile)`, `switches` the parent's `kernel_switches()`."""
    tokens, gated, kind, switches, config, forced_tile = trial
    set_kernel_switches(switches)
    run, _, _ = matmul_of_batch(tokens, gated, kind, forced_tile)
    try:
        run(config=config)
    except triton.runtime.errors.OutOfResources:
        pass
    torch.cuda.synchronize()


# the module settings that choose the kernels a worker compiles, passed on to it (the flags set most of them)
KERNEL_SETTINGS = (
    (e4m3_to_bf16, "ENABLED"),
    (moe_triton, "GATE_UP_IN_FP16"),
    (moe_triton, "DOWN_IN_FP16"),
    (moe_tiles, "PAIR_OUTPUTS_IN_INPUT_DTYPE"),
    (moe_tiles, "FP8_ACTIVATION_SUMS_IN_FP32"),
    (moe_tiles, "FP8_INTERMEDIATE_PER_ROW"),
    (moe_tiles, "FP8_INTERMEDIATE_GROUP"),
)


def kernel_switches() -> tuple[bool | int, ...]:
    """This process's `KERNEL_SETTINGS`."""
    return tuple(getattr(module, name) for module, name in KERNEL_SETTINGS)


def set_kernel_switches(switches: tuple[bool | int, ...]) -> None:
    """`kernel_switches()`' values set in this process (a compiling worker)."""
    for (module, name), value in zip(KERNEL_SETTINGS, switches, strict=True):
        setattr(module, name, value)


def compile_all(token_counts: list[int], jobs: int, kind: str, forced_tile: int | None = None) -> None:
    """`compile_one` over the grid in `jobs` processes, once per kernel specialization: token counts with
    the same row tile, whose pair counts are alike multiples of 16 or not, share their kernels."""
    # by its name, so the workers can find `compile_one`
    import experiments.kernels.moe_tile_sweep as sweep

    kinds = {}
    for tokens in token_counts:
        block_m = tile_rows(tokens, forced_tile, kind)
        kinds.setdefault((block_m, tokens * TOP_K % 16 == 0), tokens)
    trials = [
        (tokens, gated, kind, kernel_switches(), config, forced_tile)
        for (block_m, _), tokens in kinds.items()
        for gated in MATMULS.values()
        for config in grid(kind, gated)
        if in_grid(config, block_m, gated, shared_memory(), kind)
    ]
    jobs = min(jobs, processes_that_fit())
    print(f"compiling {len(trials)} kernels in {jobs} processes", flush=True)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(sweep.compile_one, trials, chunksize=4))


# A compiling process's CUDA context and what else it holds besides its layer of experts
CONTEXT_BYTES = 1 << 30


def processes_that_fit() -> int:
    """How many compiling processes this GPU's free memory holds, each with its own layer of experts: in
    bf16, in fp8, and the two fp32 temporaries of gate/up that quantizing them holds at once (sixteen
    overflowed an H100: experiments/results/2026-12-05-h100-moe-tiles-and-o-split.md)."""
    elements = NUM_EXPERTS * 3 * HIDDEN * INTERMEDIATE
    gate_up_elements = elements * 2 // 3
    per_process = CONTEXT_BYTES + elements * (BF16_BYTES + 1) + 2 * gate_up_elements * 4
    free, _ = torch.cuda.mem_get_info()
    return max(1, free // per_process)


def timed_configs(
    tokens: int, gated: bool, kind: str, forced_tile: int | None = None
) -> tuple[dict[GroupedMatmulConfig, float], int, int]:
    """µs per call of each configuration of the grid that fits (and of the table's, where the grid's rules
    allow it: not where the sweep sets another quantization group); the row tile and the experts touched."""
    run, block_m, touched = matmul_of_batch(tokens, gated, kind, forced_tile)
    configs = [c for c in grid(kind, gated) if in_grid(c, block_m, gated, shared_memory(), kind)]
    table = table_config(tokens * TOP_K, gated, kind)
    times = {}
    for config in configs + ([] if table in configs or table not in grid(kind, gated) else [table]):
        try:
            times[config] = time_us(functools.partial(run, config=config))
        except triton.runtime.errors.OutOfResources:  # too large a tile for shared memory
            continue
    return times, block_m, touched


def launch(config: GroupedMatmulConfig) -> str:
    return f"({config.block_n}, {config.block_k}, {config.num_warps}, {config.num_stages})"


def sweep(
    token_counts: list[int], kind: str, forced_tile: int | None = None
) -> dict[tuple[int, str], dict[GroupedMatmulConfig, float]]:
    """Times every matmul at every token count; prints each one's fastest configuration against the
    table's."""
    gate_up, down, gate_up_scale, down_scale = experts(kind != "bf16")
    one_expert = {"gate/up": expert_bytes(gate_up, gate_up_scale), "down": expert_bytes(down, down_scale)}
    results = {}
    for tokens in token_counts:
        for name, gated in MATMULS.items():
            times, block_m, touched = timed_configs(tokens, gated, kind, forced_tile)
            best = min(times, key=times.get)
            table = table_config(tokens * TOP_K, gated, kind)
            gb = touched * one_expert[name] / 1e9
            was = times.get(table, math.nan)  # nan where the table's configuration does not fit
            print(
                f"{tokens:5d} tokens {name:7s} (tile {block_m:2d} rows, {touched:3d} experts, "
                f"{gb * 1e3:6.1f} MB, {len(times)} configs): best {launch(best)} {times[best]:7.1f} us "
                f"{gb / times[best] * 1e3:5.2f} TB/s | table's {launch(table)} {was:7.1f} us "
                f"{gb / was * 1e3:5.2f} TB/s",
                flush=True,
            )
            results[(tokens, name)] = times
    return results


def print_table(
    token_counts: list[int], results: dict[tuple[int, str], dict[GroupedMatmulConfig, float]], kind: str
):
    """The table of `kind` (`engine_table`) with each swept band's configuration per matmul: the one with the
    least time summed over the band's token counts (of those timed at all of them); bands without a swept
    token count kept."""
    name, current_table = engine_table(kind)
    rows = []
    for band, (most, *current) in enumerate(current_table):
        counts = [t for t in token_counts if config_band(t * TOP_K, NUM_EXPERTS) == band]
        chosen = []
        for matmul, table in zip(MATMULS, current):
            if not counts:
                chosen.append(table)
                continue
            timed = [results[(t, matmul)] for t in counts]
            common = set.intersection(*(set(times) for times in timed))
            best = min(common, key=lambda c: sum(times[c] for times in timed))
            total = sum(times[best] for times in timed)
            was = sum(times.get(table, math.nan) for times in timed)
            print(
                f"band <= {most}: tokens {counts} {matmul}: {launch(best)} {total:.1f} us, "
                f"table's {was:.1f} us"
            )
            chosen.append(best)
        most_text = "math.inf" if math.isinf(most) else repr(most)
        gate_up, down = (f"GroupedMatmulConfig{launch(config)}" for config in chosen)
        rows.append(f"    ({most_text}, {gate_up}, {down}),")
    print(f"{name}: tuple[tuple[float, GroupedMatmulConfig, GroupedMatmulConfig], ...] = (")
    print("\n".join(rows))
    print(")")


def token_list(text: str) -> list[int]:
    counts = [int(t) for t in text.split(",")]
    if any(t < 1 for t in counts):
        raise argparse.ArgumentTypeError(f"token counts must be positive, got {text}")
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tokens", type=token_list, default=list(TOKENS), help="comma-separated token counts"
    )
    parser.add_argument(
        "--jobs", type=int, default=min(16, os.cpu_count() or 1), help="0: compile while timing"
    )
    parser.add_argument(
        "--row-tile", type=int, choices=(16, 32, 64, 128), help="every token count at this row tile"
    )
    add_fp8_arguments(parser, "experts", activations=True)
    intermediate = parser.add_mutually_exclusive_group()
    help = "with --fp8-activations: the intermediate quantized a scale a row (FP8_INTERMEDIATE_PER_ROW)"
    intermediate.add_argument("--intermediate-per-row", action="store_true", help=help)
    help = "with --fp8-activations: the intermediate's quantization group (FP8_INTERMEDIATE_GROUP)"
    intermediate.add_argument("--intermediate-group", type=int, choices=(32, 64, 128), help=help)
    args = parser.parse_args()
    convert_as_asked(parser, args)
    for flag, given in (
        ("--intermediate-per-row", args.intermediate_per_row),
        ("--intermediate-group", args.intermediate_group),
    ):
        if given and not args.fp8_activations:
            parser.error(f"{flag} quantizes fp8 activations' intermediates: it needs --fp8-activations")
    if args.intermediate_group:
        moe_tiles.FP8_INTERMEDIATE_PER_ROW = False
        moe_tiles.FP8_INTERMEDIATE_GROUP = args.intermediate_group
    elif args.intermediate_per_row:
        moe_tiles.FP8_INTERMEDIATE_PER_ROW = True
    kind = "fp8 activations" if args.fp8_activations else "fp8" if args.fp8 else "bf16"
    if args.jobs:
        compile_all(args.tokens, args.jobs, kind, args.row_tile)
    print_table(args.tokens, sweep(args.tokens, kind, args.row_tile), kind)
