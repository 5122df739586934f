"""bf16 rows as fp16 times a power of two per row, exactly: `x == x16 * scale[:, None]` for every value within
2^-28 of its row's largest magnitude.

Why: a kernel multiplying activations by fp8 weights converts every weight element it reads before its MMA.
Against fp16 activations the GPU converts an e4m3 pair to an f16 pair in one instruction; against bf16 it
takes two steps, or four instructions a pair moving bits (`nvllm.ops.e4m3_to_bf16`), and the MoE grouped
matmuls on fp8 experts issue more instructions than their bytes need (gate/up of Qwen3-30B-A3B at 256 tokens
on an H200: 129.3 µs on bf16 activations moving bits, 120.3 on fp16; experiments/results/
2026-12-05-h200-moe-aims.md).

fp16 has three more mantissa bits than bf16 but five fewer exponent bits: a bf16 value is an fp16 value
from 2^-14 up to 65,504, and nothing outside. So each row is scaled by the power of two that brings its
largest magnitude into [2^14, 2^15): every value of the row within 2^-28 of it is then exact in fp16, and a
smaller one rounds to fp16's subnormal step, at most 2^-39 of the row's largest (bf16 resolves 2^-8 of it).
A matmul on `x16` multiplies each row's sums by `scale` back, exactly."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.pdl import overlap_prior_kernel, pdl_launch

# a row's largest magnitude is scaled into [2^(TOP - 1), 2^TOP), below fp16's largest (65,504)
TOP = 15
_TOP = tl.constexpr(TOP)


@triton.jit
def _fp16_rows_kernel(x_ptr, x16_ptr, scale_ptr, width, stride_x, BLOCK: tl.constexpr, PDL: tl.constexpr):
    overlap_prior_kernel(PDL)
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    inside = columns < width
    x = tl.load(x_ptr + row * stride_x + columns, inside, 0.0).to(tl.float32)
    # the largest magnitude's exponent field: 2^(field - 127) <= amax < 2^(field - 126); a row of zeros (or of
    # fp32 subnormals) keeps scale 1, and the shift stays where the scale and its inverse are normal numbers
    field = (tl.max(tl.abs(x), axis=0).to(tl.int32, bitcast=True) >> 23) & 0xFF
    shift = tl.where(field == 0, 0, tl.minimum(tl.maximum(field - 126 - _TOP, -126), 126))
    scale = ((shift + 127) << 23).to(tl.float32, bitcast=True)
    inverse = ((127 - shift) << 23).to(tl.float32, bitcast=True)
    tl.store(x16_ptr + row * width + columns, (x * inverse).to(tl.float16), inside)
    tl.store(scale_ptr + row, scale)


def fp16_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(x16, scale)` of bf16 rows `x` `[rows, width]`: contiguous fp16 `[rows, width]` and fp32 powers of two
    `[rows]` (module docstring). One kernel."""
    rows, width = x.shape
    assert x.stride(1) == 1, "fp16_rows reads each row's columns contiguous"
    x16 = torch.empty((rows, width), dtype=torch.float16, device=x.device)
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows:
        _fp16_rows_kernel[(rows,)](
            x,
            x16,
            scale,
            width,
            x.stride(0),
            BLOCK=triton.next_power_of_2(width),
            num_warps=4,
            **pdl_launch(x.device),
        )
    return x16, scale


def fp16_rows_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`fp16_rows` in torch."""
    amax = x.float().abs().amax(dim=1)
    exponent = torch.frexp(amax).exponent  # 2^(exponent - 1) <= amax < 2^exponent
    shift = torch.where(amax < 2**-126, 0, (exponent - TOP).clamp(-126, 126))  # zeros (and fp32 subnormals)
    scale = torch.exp2(shift.float())
    return (x.float() / scale[:, None]).to(torch.float16), scale
