"""fp8 weights multiplying fp16 activations instead of bf16 ones, timed on the GPU: what taking the dots in
fp16 would save a single stream.

Every e4m3 value is an fp16 one, and Hopper converts a pair of them to fp16 in one instruction; bf16 needs
more (`nvllm.ops.e4m3_to_bf16`). Counted in SASS, fp16 dots cut a third of the single stream's fp8 loops'
instructions (experiments/results/2026-12-05-cpu-fp8-weights-f16-dots.md); this measures whether that makes
the kernels faster, before any engine path multiplies fp16 activations (it did not:
experiments/results/2026-12-05-h100-fp16-dots-and-cold-prefill.md).

For each fp8 kernel of a single stream, at 1 and 2 rows (a single stream's graph runs one token, or one
and its padding): µs with bf16 activations (bits moved, the engine's way) and with fp16 activations
(Triton's conversion), at the engine's launch shapes, and the fastest of a few other shapes for fp16
(fewer instructions a slice can move the best slice length).
- Qwen3-30B-A3B: the q/k/v and o skinny matmuls (the o projection at its table's split). The skinny
  experts' two launches were timed here too (the results file above); they no longer take dots.
- Qwen3-8B: q/k/v, o, gate/up (gated) and down.
Timed as `skinny_matmul_bench` times (one call in a CUDA graph, inputs read from memory, not the L2).

`python -m experiments.kernels.fp16_dots_bench`"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

import torch
import triton

from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.skinny_matmul import skinny_config, skinny_matmul

ROWS = (1, 2)
ACTIVATIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}
# (n, k, gated): a model's single-stream matmuls over fp8 weights
MATMULS = {
    "qwen3-30b-a3b q/k/v": (5120, 2048, False),
    "qwen3-30b-a3b o": (2048, 4096, False),
    "qwen3-8b q/k/v": (6144, 4096, False),
    "qwen3-8b o": (4096, 4096, False),
    "qwen3-8b gate/up": (12288, 4096, True),
    "qwen3-8b down": (4096, 12288, False),
}
# other launch shapes tried for fp16: (BLOCK_N, BLOCK_K, num_warps, num_stages)
MATMUL_SHAPES = list(itertools.product((32, 64), (256, 512), (4,), (3, 4)))
GATED_SHAPES = list(itertools.product((16, 32), (128, 256), (4,), (3, 4)))


def summed_us(run: Callable[[torch.Tensor], object], inputs: dict[int, torch.Tensor]) -> float | None:
    """µs of `run` summed over the row counts of `inputs`; None where the launch does not fit."""
    try:
        return sum(time_us(partial(run, inputs[rows])) for rows in ROWS)
    except triton.runtime.errors.OutOfResources:
        return None


def best_of(timed: dict[tuple, float | None]) -> tuple[tuple, float]:
    """The launch shape with the least time of those that ran."""
    return min(((shape, us) for shape, us in timed.items() if us is not None), key=lambda item: item[1])


def matmul_row(name: str, n: int, k: int, gated: bool) -> str:
    torch.manual_seed(0)
    weight, scale = quantize_rows(torch.randn(2 * n if gated else n, k, device="cuda") / k**0.5)
    table = skinny_config(n, k, gated, weight_bytes=1)
    times = {}
    for activation, dtype in ACTIVATIONS.items():
        inputs = {rows: torch.randn(rows, k, device="cuda", dtype=dtype) for rows in ROWS}
        run = partial(skinny_matmul, weight=weight, config=table, gated=gated, weight_scale=scale)
        times[activation] = summed_us(lambda x, run=run: run(x), inputs)
    others = {}
    for shape in GATED_SHAPES if gated else MATMUL_SHAPES:
        inputs = {rows: torch.randn(rows, k, device="cuda", dtype=torch.float16) for rows in ROWS}
        run = partial(skinny_matmul, weight=weight, config=shape, gated=gated, weight_scale=scale, split_k=1)
        others[shape] = summed_us(lambda x, run=run: run(x), inputs)
    shape, us = best_of(others)
    return (
        f"{name:22s} table {table}: bf16 {times['bf16']:6.1f} us, fp16 {times['fp16']:6.1f} us "
        f"({times['fp16'] / times['bf16'] - 1:+.0%}); fp16's best {shape} {us:6.1f} us"
    )


if __name__ == "__main__":
    print(f"µs summed over {ROWS} rows; fp8 weights, a scale per row", flush=True)
    for name, (n, k, gated) in MATMULS.items():
        print(matmul_row(name, n, k, gated), flush=True)
