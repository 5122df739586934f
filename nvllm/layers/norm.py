import torch
from torch import nn

from nvllm.ops.norm_ops import add_rms_norm, add_rms_norm_reference, rms_norm


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
