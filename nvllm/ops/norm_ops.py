"""`nvllm::add_rms_norm`: a decoder layer's residual add and RMSNorm as one custom op, so that on CUDA they
run as nvllm's Triton kernel (`nvllm.ops.add_rms_norm`), launched like the kernels around it
(`nvllm.ops.pdl`), where inductor would generate a kernel of its own. `nvllm.layers.norm.RMSNorm` takes it
only inside a compiled graph; eager mode computes the same in torch.
"""

from __future__ import annotations

import torch


@torch.library.custom_op("nvllm::add_rms_norm", mutates_args=())
def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(rms_norm(x + residual), x + residual)` over the last dimension, as `RMSNorm` rounds them."""
    if x.is_cuda:
        from nvllm.ops.add_rms_norm import add_rms_norm as add_rms_norm_kernel

        width = x.shape[-1]
        normed, summed = add_rms_norm_kernel(
            x.reshape(-1, width).contiguous(), residual.reshape(-1, width).contiguous(), weight, eps
        )
        return normed.view(x.shape), summed.view(x.shape)
    from nvllm.layers.norm import add_rms_norm_reference

    return add_rms_norm_reference(x, residual, weight, eps)


@add_rms_norm.register_fake
def _(x, residual, weight, eps):
    return torch.empty_like(x), torch.empty_like(x)
