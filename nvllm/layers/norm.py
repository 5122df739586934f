import torch
from torch import nn

from nvllm.ops.norm_ops import add_rms_norm


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


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32; given a residual, adds it first and returns the new residual too: one
    kernel, `nvllm::add_rms_norm`, in a compiled graph."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return rms_norm(x, self.weight, self.eps)
        if torch.compiler.is_compiling():
            return add_rms_norm(x, residual, self.weight, self.eps)
        return add_rms_norm_reference(x, residual, self.weight, self.eps)
