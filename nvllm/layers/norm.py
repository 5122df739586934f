import torch
from torch import nn

from nvllm.ops.linear_ops import uses_skinny_matmul
from nvllm.ops.norm_ops import add_rms_norm, add_rms_norm_reference, rms_norm


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32; given a residual, adds it first and returns the new residual too: one
    kernel, `nvllm::add_rms_norm`, in a compiled graph. `fuse_in_graph=True` leaves the add and the norm to
    inductor instead, which then fuses what follows into the same kernel: the activation quantization of fp8
    matmuls (`nvllm.ops.fp8_linear_ops`), which batches small enough for the skinny kernel do not have
    unless `small_batches_quantize` (`model.fp8_activations`)."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        fuse_in_graph: bool = False,
        small_batches_quantize: bool = False,
    ):
        super().__init__()
        self.eps = eps
        self.fuse_in_graph = fuse_in_graph
        self.small_batches_quantize = small_batches_quantize
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return rms_norm(x, self.weight, self.eps)
        # a small CUDA batch's matmuls (the skinny kernel) quantize no activations: nothing to fuse, and the
        # kernel keeps the chain of programmatic dependent launches that an inductor kernel would break
        if torch.compiler.is_compiling() and (
            not self.fuse_in_graph or (not self.small_batches_quantize and uses_skinny_matmul(x))
        ):
            return add_rms_norm(x, residual, self.weight, self.eps)
        return add_rms_norm_reference(x, residual, self.weight, self.eps)
