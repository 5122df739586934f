import torch
from torch import nn


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32; given a residual, adds it first and returns the new residual too, so the
    add and the norm fuse into one kernel under torch.compile."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)

    def _norm(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        dtype = x.dtype
        if residual is None:
            return self._norm(x.float(), dtype)
        x = x.float() + residual.float()
        return self._norm(x, dtype), x.to(dtype)
