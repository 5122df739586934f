"""`x + residual` and its RMSNorm as one Triton kernel, a row a program: `nvllm::add_rms_norm` on CUDA. At
128-8,192 rows it is level with inductor's fused kernel for the same two
(experiments/results/2026-12-01-h200-norm-fused-projections.md), and being ours it is launched with
programmatic dependent launch like the kernels around it (nvllm.ops.pdl). Rounded as
nvllm.layers.norm.RMSNorm rounds: the sum and the norm in fp32, each rounded once to the inputs' dtype."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.pdl import overlap_prior_kernel, pdl_launch


@triton.jit
def _add_rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    normed_ptr,
    summed_ptr,
    width,
    eps,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    overlap_prior_kernel(PDL)
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    inside = columns < width
    offsets = row * width + columns
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
    summed = x.to(tl.float32) + tl.load(residual_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    inverse_rms = tl.rsqrt(tl.sum(summed * summed, axis=0) / width + eps)
    weight = tl.load(weight_ptr + columns, mask=inside, other=0.0).to(tl.float32)
    tl.store(normed_ptr + offsets, (summed * inverse_rms * weight).to(x.dtype), mask=inside)
    tl.store(summed_ptr + offsets, summed.to(x.dtype), mask=inside)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(rms_norm(x + residual), x + residual)` of contiguous `[rows, width]` inputs."""
    assert x.is_contiguous() and residual.is_contiguous() and residual.shape == x.shape
    rows, width = x.shape
    normed, summed = torch.empty_like(x), torch.empty_like(x)
    if rows:
        block = triton.next_power_of_2(width)
        _add_rms_norm_kernel[(rows,)](
            x,
            residual,
            weight,
            normed,
            summed,
            width,
            eps,
            BLOCK=block,
            num_warps=min(16, max(4, block // 512)),
            **pdl_launch(x.device),
        )
    return normed, summed
