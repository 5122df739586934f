"""`silu(gate) * up` of a packed `[gate | up]` input as one Triton kernel, in fp32 and rounded once (as
inductor's fused kernel computes it): what `nvllm::linear_silu_mul` runs after cuBLAS for the batches that
the skinny matmul does not take."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.pdl import overlap_prior_kernel, pdl_launch

BLOCK = 1024  # columns per program


@triton.jit
def _silu_and_mul_kernel(
    x_ptr, y_ptr, width, x_row_stride, y_row_stride, BLOCK: tl.constexpr, PDL: tl.constexpr
):
    overlap_prior_kernel(PDL)
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = columns < width
    gate = tl.load(x_ptr + row * x_row_stride + columns, mask=inside, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_row_stride + width + columns, mask=inside, other=0.0).to(tl.float32)
    product = gate * tl.sigmoid(gate) * up
    tl.store(y_ptr + row * y_row_stride + columns, product.to(y_ptr.dtype.element_ty), mask=inside)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """`[rows, 2 * width]` with contiguous rows → `[rows, width]`."""
    rows, packed = x.shape
    assert x.stride(1) == 1 and packed % 2 == 0
    width = packed // 2
    y = x.new_empty((rows, width))
    if rows:
        _silu_and_mul_kernel[(rows, triton.cdiv(width, BLOCK))](
            x, y, width, x.stride(0), y.stride(0), BLOCK=BLOCK, num_warps=4, **pdl_launch(x.device)
        )
    return y
