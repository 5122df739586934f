"""nvllm's fp8 Triton GEMM (`nvllm.ops.fp8_gemm`) against `torch._scaled_mm` on the same quantized operands,
at decode batches of Qwen3-8B's projections: per (shape, rows), cuBLAS' time; the kernel's in the launch
shape `gemm_config` picks for shapes without a table entry, and in the table's (`chosen_config`); and the
fastest of a grid of launch shapes (what `nvllm.ops.fp8_gemm.CONFIGS` holds). Each time is one call with the
weight read from memory (`experiments.kernels.skinny_matmul_bench.time_us`), as in a model's step.

`python -m experiments.kernels.fp8_gemm_bench [--rows 32,64,128,192,256] [--no-grid]`"""

from __future__ import annotations

import argparse
import itertools
from functools import partial

import torch
import triton

from experiments.kernels.skinny_matmul_bench import SHAPES, time_us
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.fp8_gemm import GemmConfig, chosen_config, fp8_gemm, gemm_config

GRID = [
    GemmConfig(block_m, block_n, block_k, num_warps, num_stages)
    for block_m, block_n, (block_k, num_stages), num_warps in itertools.product(
        (64, 128), (32, 64, 128), ((128, 4), (256, 3)), (4, 8)
    )
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="32,64,128,192,256")
    parser.add_argument("--no-grid", action="store_true", help="only cuBLAS and the picked launch shape")
    arguments = parser.parse_args()
    rows = [int(m) for m in arguments.rows.split(",")]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    torch.manual_seed(0)
    for n, k in SHAPES["qwen3-8b"][:4]:
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
            print(line, flush=True)


if __name__ == "__main__":
    main()
