"""nvllm's fp8 Triton GEMM (`nvllm.ops.fp8_gemm`) against `torch._scaled_mm` on the same quantized operands,
at decode batches of `--model`'s fp8 projections (Qwen3-8B's by default): per (shape, rows), cuBLAS' time;
the kernel's in the launch shape `gemm_config` picks for shapes without a table entry, and in the table's
(`chosen_config`); and the fastest of a grid of launch shapes. Each time is one call with the weight read
from memory (`experiments.kernels.skinny_matmul_bench.time_us`), as in a model's step. At the end, the
`nvllm.ops.fp8_gemm.CONFIGS` entries to paste: per shape a band per row count timed (up to it), the grid's
fastest, or None where cuBLAS was as fast; neighbouring bands that pick the same, merged.

`--small-batch` times batches of at most 16 rows instead (`--model`'s projections, Qwen3-8B's or
Qwen3-30B-A3B's): the skinny kernel on bf16 activations and the fp8 weight (what such batches run by
default), against `fp8_gemm`'s small-batch kernel on the quantized activations (what they run with
`model.fp8_activations`; the quantization itself not timed) in `small_batch_config`'s launch shape and the
fastest of `SMALL_BATCH_GRID`.

`python -m experiments.kernels.fp8_gemm_bench [--model qwen3-30b-a3b] [--rows 32,64,128,192,256] [--no-grid]`
`python -m experiments.kernels.fp8_gemm_bench --small-batch [--model qwen3-30b-a3b] [--rows 1,16]`"""

from __future__ import annotations

import argparse
import itertools
from functools import partial

import torch
import triton

from experiments.kernels.skinny_matmul_bench import SHAPES, time_us
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.fp8_gemm import (
    SMALL_BATCH_MAX_ROWS,
    GemmConfig,
    chosen_config,
    fp8_gemm,
    gemm_config,
    small_batch_config,
)
from nvllm.ops.skinny_matmul import skinny_config, skinny_matmul

GRID = [
    GemmConfig(block_m, block_n, block_k, num_warps, num_stages)
    for block_m, block_n, (block_k, num_stages), num_warps in itertools.product(
        (64, 128), (32, 64, 128), ((128, 4), (256, 3)), (4, 8)
    )
]


SMALL_BATCH_GRID = [
    GemmConfig(SMALL_BATCH_MAX_ROWS, block_n, block_k, 4, num_stages)
    for block_n, block_k, num_stages in itertools.product((64, 128), (128, 256), (3, 4, 5))
]
# the projections whose weights are fp8 (the router and the LM head stay bf16)
FP8_PROJECTIONS = {"qwen3-8b": SHAPES["qwen3-8b"][:4], "qwen3-30b-a3b": SHAPES["qwen3-30b-a3b"][:2]}


def small_batches(model: str, rows: list[int]) -> None:
    """`--small-batch`: per projection of `model` and batch, the skinny kernel against the small-batch fp8
    GEMM, picked and fastest."""
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    torch.manual_seed(0)
    for n, k in FP8_PROJECTIONS[model]:
        q, scale = quantize_rows(torch.randn(n, k, device="cuda"))
        megabytes = n * k / 1e6
        skinny_shape = skinny_config(n, k, weight_bytes=1)
        for m in rows:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            x_q, x_scale = quantize_rows(x)
            skinny = time_us(partial(skinny_matmul, x, q, skinny_shape, weight_scale=scale))
            run = partial(fp8_gemm, x_q, x_scale, q, scale, torch.bfloat16)
            picked = small_batch_config(n, k, num_sms)
            ours = time_us(partial(run, config=picked))
            best_us, best = min((time_us(partial(run, config=config)), config) for config in SMALL_BATCH_GRID)
            print(
                f"{model} {n}x{k} ({megabytes:.1f} MB) M={m}: skinny {skinny:.1f}us "
                f"({megabytes / skinny:.2f} TB/s) | picked {tuple(picked)} {ours:.1f}us "
                f"({megabytes / ours:.2f} TB/s) | best {tuple(best)} {best_us:.1f}us "
                f"({megabytes / best_us:.2f} TB/s)",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", help="batch sizes (default 32,64,128,192,256; --small-batch: 1,2,8,16)")
    parser.add_argument("--no-grid", action="store_true", help="only cuBLAS and the picked launch shape")
    parser.add_argument("--small-batch", action="store_true", help="batches of at most 16 rows")
    parser.add_argument("--model", choices=sorted(FP8_PROJECTIONS), default="qwen3-8b")
    arguments = parser.parse_args()
    if arguments.small_batch:
        rows = [int(m) for m in (arguments.rows or "1,2,8,16").split(",")]
        if max(rows) > SMALL_BATCH_MAX_ROWS:
            parser.error(f"--small-batch takes at most {SMALL_BATCH_MAX_ROWS} rows")
        small_batches(arguments.model, rows)
        return
    rows = [int(m) for m in (arguments.rows or "32,64,128,192,256").split(",")]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    torch.manual_seed(0)
    bands = {}
    for n, k in FP8_PROJECTIONS[arguments.model]:
        q, scale = quantize_rows(torch.randn(n, k, device="cuda"))
        megabytes = n * k / 1e6
        for m in rows:
            x_q, x_scale = quantize_rows(torch.randn(m, k, device="cuda"))
            scales = {"scale_a": x_scale[:, None], "scale_b": scale[None, :]}
            cublas = time_us(partial(torch._scaled_mm, x_q, q.t(), **scales, out_dtype=torch.bfloat16))
            picked = gemm_config(m, n, num_sms)
            run = partial(fp8_gemm, x_q, x_scale, q, scale, torch.bfloat16)
            ours = time_us(partial(run, config=picked))
            line = (
                f"{n}x{k} ({megabytes:.1f} MB) M={m}: "
                f"scaled_mm {cublas:.1f}us ({megabytes / cublas:.2f} TB/s) "
                f"| picked {tuple(picked)} {ours:.1f}us ({megabytes / ours:.2f} TB/s)"
            )
            table = chosen_config(m, n, k, num_sms)
            if table is None:
                line += " | table: scaled_mm"
            else:
                line += f" | table {tuple(table)} {time_us(partial(run, config=table)):.1f}us"
            if not arguments.no_grid:
                timed = []
                for config in GRID:
                    try:
                        timed.append((time_us(partial(run, config=config)), config))
                    except triton.runtime.errors.OutOfResources:
                        continue
                best_us, best = min(timed)
                line += f" | best {tuple(best)} {best_us:.1f}us ({megabytes / best_us:.2f} TB/s)"
                bands.setdefault((n, k), []).append((m, best if best_us < cublas else None))
            print(line, flush=True)
    if bands:
        print_configs(bands)


def print_configs(bands: dict[tuple[int, int], list[tuple[int, GemmConfig | None]]]) -> None:
    """`nvllm.ops.fp8_gemm.CONFIGS` entries: per weight shape, (most rows, launch shape or None) by band in
    increasing rows, a band and the next merged where they pick the same."""
    print("CONFIGS entries:")
    for shape, shape_bands in bands.items():
        merged = [
            band
            for band, later in zip(shape_bands, [*shape_bands[1:], None])
            if later is None or later[1] != band[1]
        ]
        text = ", ".join(f"({m}, {'None' if c is None else f'GemmConfig{tuple(c)}'})" for m, c in merged)
        print(f"    {shape}: ({text},),")


if __name__ == "__main__":
    main()
