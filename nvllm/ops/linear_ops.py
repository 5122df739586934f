"""`nvllm::linear`: the model's matmuls, as a custom op that picks its kernel by batch size at run time.

A decode step of a few sequences runs `skinny_matmul` (a Triton kernel that streams the weight at memory
bandwidth) where it beats cuBLAS, anything larger cuBLAS through `F.linear`. The choice is made inside the
op, on the actual row count, so one compiled graph (dynamic in the batch size) serves both without a guard
or a recompile.

The MLP's gate/up projection is `nvllm::linear_silu_mul`: the matmul and the SwiGLU activation of its
packed `[gate | up]` output as one op, so that small batches run them as one kernel (the skinny matmul with
the activation in its epilogue, which also writes half the output).

Both take an fp8 weight with its scales too (`weight_scale`, `model.quantization=fp8`; `nvllm.ops.fp8`): small
CUDA batches then run the skinny kernel on the fp8 weight, larger ones `torch._scaled_mm`, the CPU the fp32
reference. That is what fp8 layers run in eager mode; compiled graphs take `nvllm::scaled_mm` instead
(`nvllm.ops.fp8_linear_ops`), whose activations come quantized by code that inductor fuses.

Layers call `apply_linear` and `apply_linear_silu_mul`, which take the ops only inside a compiled graph (see
there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nvllm.ops.fp8 import fp8_matmul
from nvllm.ops.op_library import inference_op, register_fake

SKINNY_MAX_ROWS = 16  # nvllm.ops.skinny_matmul.MAX_ROWS (not imported here: it needs triton)


def uses_skinny_matmul(x: torch.Tensor) -> bool:
    # the row count last: while tracing, comparing it is a guard (a graph of small batches' own), which a
    # CPU graph, say, should not get
    on_cuda = x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
    return on_cuda and x.dim() == 2 and x.shape[0] <= SKINNY_MAX_ROWS


def chosen_skinny_config(x: torch.Tensor, weight: torch.Tensor, gated: bool = False):
    """The skinny kernel's configuration where it takes `x @ weight.T` (a small CUDA batch, a weight shape
    its tables do not leave to cuBLAS), else None."""
    if not uses_skinny_matmul(x):
        return None
    from nvllm.ops.skinny_matmul import skinny_config

    return skinny_config(*weight.shape, gated=gated, weight_bytes=weight.element_size())


def add_bias(y: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """A kernel's fresh output plus the layer's bias (Qwen2's q/k/v, Llama's where `attention_bias`)."""
    return y if bias is None else y.add_(bias)


def matmul_by_batch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    weight_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """`nvllm::linear`'s computation, which fp8 weights take in eager mode too."""
    config = chosen_skinny_config(x, weight)
    if config is not None:
        from nvllm.ops.skinny_matmul import skinny_matmul

        return add_bias(skinny_matmul(x.contiguous(), weight, config, weight_scale=weight_scale), bias)
    if weight_scale is not None:
        return add_bias(fp8_matmul(x, weight, weight_scale), bias)
    return F.linear(x, weight, bias)


@inference_op("linear", mutates_args=())
def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    weight_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """`F.linear(x, weight, bias)`; for a CUDA batch of at most 16 rows, the skinny Triton kernel. With
    `weight_scale`: an fp8 weight, `x @ (weight * weight_scale[:, None])ᵀ`."""
    return matmul_by_batch(x, weight, bias, weight_scale)


@register_fake(linear)
def _(x, weight, bias=None, weight_scale=None):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def apply_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    weight_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """What the layers call: `nvllm::linear` while compiling, plain `F.linear` in eager mode. Eager launches
    every kernel from Python, so a custom op's dispatch plus a Triton launch cost more per matmul than the
    skinny kernel saves (experiments/results/2026-11-29-h200-prefill-graphs.md). An fp8 weight has no
    `F.linear`: eager mode runs the op's computation."""
    if torch.compiler.is_compiling():
        return linear(x, weight, bias, weight_scale)
    if weight_scale is not None:
        return matmul_by_batch(x, weight, bias, weight_scale)
    return F.linear(x, weight, bias)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up` of a packed `[gate | up]`, in fp32 and rounded once, as inductor fuses it."""
    gate, up = gate_up.float().chunk(2, -1)
    return (F.silu(gate) * up).to(gate_up.dtype)


@inference_op("linear_silu_mul", mutates_args=())
def linear_silu_mul(
    x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor | None = None
) -> torch.Tensor:
    """`silu(gate) * up` of `F.linear(x, weight) = [gate | up]` (a packed `[gate; up]` weight), the matmul's
    output rounded to its dtype first as an unfused matmul's is. On CUDA a batch of at most 16 rows runs the
    skinny kernel with the activation in its epilogue; a larger one cuBLAS (`torch._scaled_mm` for an fp8
    weight with its `weight_scale`), then a Triton kernel for the activation."""
    config = chosen_skinny_config(x, weight, gated=True)
    if config is not None:
        from nvllm.ops.skinny_matmul import skinny_matmul

        return skinny_matmul(x.contiguous(), weight, config, gated=True, weight_scale=weight_scale)
    gate_up = F.linear(x, weight) if weight_scale is None else fp8_matmul(x, weight, weight_scale)
    if gate_up.is_cuda:
        from nvllm.ops.silu_and_mul import silu_and_mul

        return silu_and_mul(gate_up)
    return silu_mul(gate_up)


@register_fake(linear_silu_mul)
def _(x, weight, weight_scale=None):
    return x.new_empty((*x.shape[:-1], weight.shape[0] // 2))


def apply_linear_silu_mul(
    x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor | None = None
) -> torch.Tensor:
    """What the MLP's gate/up projection calls: `nvllm::linear_silu_mul` while compiling; in eager mode
    the matmul and the activation as Hugging Face's Qwen3 computes it (in the weights' dtype)."""
    if torch.compiler.is_compiling():
        return linear_silu_mul(x, weight, weight_scale)
    gate, up = apply_linear(x, weight, weight_scale=weight_scale).chunk(2, -1)
    return F.silu(gate) * up
