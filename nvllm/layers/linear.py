"""Linear layers that shard themselves over the tensor-parallel group.

Each layer's `weight_loader(param, full_tensor[, shard_id])` takes the *unsharded* checkpoint tensor of one
of its parameters and copies in this rank's slice (`nvllm.models.weights.load_weights` calls it), so
checkpoints and seeded random weights go through the same code and TP=N holds exactly the slices of the
TP=1 weights. The loader is the module's method, not an attribute of the parameter: a bound method held by
a parameter would make a reference cycle, and the weights would outlive `shutdown()` until a collection.

With `quantization="fp8"` a layer holds its weight in float8 with a scale per output channel (the buffer
`weight_scale`, `nvllm.ops.fp8`). The loader quantizes the whole checkpoint tensor, then takes this rank's
slice of both, so TP=N holds exactly the slices of the TP=1 fp8 weights, whose matmuls
`nvllm.ops.fp8_linear_ops` runs; with `fp8_activations` (`model.fp8_activations`) on activations quantized
at every batch size. A row-parallel layer's input is quantized a scale per token of each rank's slice (as
larger batches' always are, and as vLLM's are), so under TP its rounding differs from TP=1's.
"""

from __future__ import annotations

import torch
from torch import nn

from nvllm.config import QUANTIZATIONS
from nvllm.distributed.group import all_reduce, tp_rank, tp_size
from nvllm.ops.fp8 import FP8, quantize_rows
from nvllm.ops.fp8_linear_ops import apply_fp8_linear, apply_fp8_linear_silu_mul
from nvllm.ops.linear_ops import apply_linear, apply_linear_silu_mul


def _copy_slice(param: nn.Parameter, full: torch.Tensor, dim: int, offset: int = 0, size: int | None = None):
    """Copy this rank's slice of `full` (split evenly along `dim`) into `param[offset:offset+size]`."""
    size = param.shape[dim] if size is None else size
    shard = full.chunk(tp_size(), dim)[tp_rank()]
    param.data.narrow(dim, offset, size).copy_(shard)


class _Linear(nn.Module):
    """A weight `[output_size, input_size]` (this rank's slice), in the default dtype or, quantized, in fp8
    with its scales; `load_slice` copies a checkpoint tensor in."""

    def __init__(self, output_size: int, input_size: int, quantization: str, fp8_activations: bool = False):
        super().__init__()
        assert quantization in QUANTIZATIONS, f"quantization={quantization!r}"
        assert not fp8_activations or quantization == "fp8", "fp8 activations need fp8 weights"
        self.fp8_activations = fp8_activations
        dtype = FP8 if quantization == "fp8" else None
        self.weight = nn.Parameter(torch.empty(output_size, input_size, dtype=dtype), requires_grad=False)
        scale = torch.empty(output_size, dtype=torch.float32) if quantization == "fp8" else None
        self.register_buffer("weight_scale", scale)

    def load_slice(
        self, param: nn.Parameter, full: torch.Tensor, dim: int, offset: int = 0, size: int | None = None
    ) -> None:
        """This rank's slice of `full` along `dim` into `param[offset:offset+size]`; into a quantized weight
        with the scales of the whole rows of `full`."""
        if param is not self.weight or self.weight_scale is None:
            _copy_slice(param, full, dim, offset, size)
            return
        q, scale = quantize_rows(full)
        _copy_slice(self.weight, q, dim, offset, size)
        if dim == 0:
            _copy_slice(self.weight_scale, scale, 0, offset, size)
        else:  # split by input columns: every rank has every output channel
            self.weight_scale.copy_(scale)

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """`x Wᵀ + bias` with this rank's weight, fp8 or not."""
        if self.weight_scale is None:
            return apply_linear(x, self.weight, bias)
        return apply_fp8_linear(x, self.weight, self.weight_scale, bias, self.fp8_activations)


class ColumnParallelLinear(_Linear):
    """y = x Wᵀ with W split by output rows: each rank produces its slice of y."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = False,
        quantization: str = "none",
        fp8_activations: bool = False,
    ):
        assert output_size % tp_size() == 0, f"{output_size} outputs do not split over {tp_size()} ranks"
        super().__init__(output_size // tp_size(), input_size, quantization, fp8_activations)
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(output_size // tp_size()), requires_grad=False)

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor) -> None:
        self.load_slice(param, full, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x, self.bias)


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel matrices packed into one matmul (gate and up of the MLP)."""

    def __init__(
        self,
        input_size: int,
        output_sizes: list[int],
        bias: bool = False,
        quantization: str = "none",
        fp8_activations: bool = False,
    ):
        self.output_sizes = output_sizes
        super().__init__(input_size, sum(output_sizes), bias, quantization, fp8_activations)

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, shard_id: int) -> None:
        local_sizes = [size // tp_size() for size in self.output_sizes]
        self.load_slice(param, full, 0, sum(local_sizes[:shard_id]), local_sizes[shard_id])


class GateUpSiluParallelLinear(MergedColumnParallelLinear):
    """The SwiGLU MLP's gate and up projections and its activation: y = silu(x Wgᵀ) * (x Wuᵀ), each rank its
    slice of both (so the activation needs nothing from the other ranks), the matmul and the activation as
    one op."""

    def __init__(
        self,
        input_size: int,
        intermediate_size: int,
        quantization: str = "none",
        fp8_activations: bool = False,
    ):
        super().__init__(input_size, [intermediate_size] * 2, False, quantization, fp8_activations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight_scale is None:
            return apply_linear_silu_mul(x, self.weight)
        return apply_fp8_linear_silu_mul(x, self.weight, self.weight_scale, self.fp8_activations)


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections in one matmul; each rank owns whole query heads and whole KV heads."""

    def __init__(
        self,
        hidden_size: int,
        head_dim: int,
        num_heads: int,
        num_kv_heads: int,
        bias: bool = False,
        quantization: str = "none",
        fp8_activations: bool = False,
    ):
        self.local_sizes = {
            "q": num_heads // tp_size() * head_dim,
            "k": num_kv_heads // tp_size() * head_dim,
            "v": num_kv_heads // tp_size() * head_dim,
        }
        outputs = (num_heads + 2 * num_kv_heads) * head_dim
        super().__init__(hidden_size, outputs, bias, quantization, fp8_activations)

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor, shard_id: str) -> None:
        offset = {"q": 0, "k": self.local_sizes["q"], "v": self.local_sizes["q"] + self.local_sizes["k"]}
        self.load_slice(param, full, 0, offset[shard_id], self.local_sizes[shard_id])


class RowParallelLinear(_Linear):
    """y = x Wᵀ with W split by input columns: each rank adds its partial product (an all-reduce)."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = False,
        quantization: str = "none",
        fp8_activations: bool = False,
    ):
        assert input_size % tp_size() == 0, f"{input_size} inputs do not split over {tp_size()} ranks"
        super().__init__(output_size, input_size // tp_size(), quantization, fp8_activations)
        self.bias = None
        if bias:  # added once, after the reduction
            self.bias = nn.Parameter(torch.empty(output_size), requires_grad=False)

    def weight_loader(self, param: nn.Parameter, full: torch.Tensor) -> None:
        if param is self.bias:
            param.data.copy_(full)  # whole on every rank: added once, after the reduction
        else:
            self.load_slice(param, full, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = all_reduce(self.matmul(x))
        return y + self.bias if self.bias is not None else y
