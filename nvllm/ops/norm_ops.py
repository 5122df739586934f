"""`nvllm::add_rms_norm`: a decoder layer's residual add and RMSNorm as one custom op, so that on CUDA they
run as nvllm's Triton kernel (`nvllm.ops.add_rms_norm`), launched like the kernels around it
(`nvllm.ops.pdl`), where inductor would generate a kernel of its own. `nvllm.layers.norm.RMSNorm` takes it
only inside a compiled graph; eager mode computes the same in torch (`add_rms_norm_reference`), the
reference that the op's CPU implementation and the layers share.
"""

from __future__ import annotations

import torch

from nvllm.ops.op_library import inference_op, register_fake


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype | None = None):
    """RMSNorm over the last dimension in fp32, rounded to `dtype` (x's own by default)."""
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (normed * weight.float()).to(x.dtype if dtype is None else dtype)


def add_rms_norm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(rms_norm(x + residual), x + residual)`: the sum in fp32, each result rounded once to x's dtype."""
    summed = x.float() + residual.float()
    return rms_norm(summed, weight, eps, x.dtype), summed.to(x.dtype)


@inference_op("add_rms_norm", mutates_args=())
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
    return add_rms_norm_reference(x, residual, weight, eps)


@register_fake(add_rms_norm)
def _(x, residual, weight, eps):
    return torch.empty_like(x), torch.empty_like(x)
