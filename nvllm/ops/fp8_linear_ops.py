"""`nvllm::scaled_mm`: the matmuls of fp8 weights (`model.quantization=fp8`, `nvllm.ops.fp8`), as a custom op
that picks its kernel by batch size at run time, like `nvllm::linear` does for bf16 weights.

The op takes the activations twice: as they are (`x`) and quantized a scale per token (`x_q`, `x_scale`,
`nvllm.ops.fp8.quantize_tokens`). A CUDA batch of at most 16 rows runs the skinny Triton kernel on `x` and
the fp8 weight; a larger one `torch._scaled_mm` on `(x_q, x_scale)`; the CPU the fp32 reference on `x`. The
quantization is not inside the op because there it ran as half a dozen eager kernels per matmul, each
reading the activations again; traced ahead of the op, inductor fuses it into the kernel that produces the
activations: the RMSNorm before the q/k/v and gate/up projections (`RMSNorm(fuse_in_graph=True)`), the
SwiGLU activation before the down projection (traced here, where bf16 weights have it inside an op), a
kernel of its own after attention.

Batches the skinny kernel takes (CUDA, at most 16 rows) need no quantized activations, and there the
activation belongs in the gate/up matmul's epilogue. So while tracing, such a batch takes `nvllm::linear`
and `nvllm::linear_silu_mul` on the fp8 weights instead: dynamo guards on the row count, and small batches
get a graph of their own, as small as bf16 weights' (a single stream's token would otherwise run a
quantization kernel after attention and an activation kernel a layer, for nothing).

With `model.fp8_activations` (a layer's `quantize_activations`) small batches quantize their activations
too: every batch takes `nvllm::scaled_mm`'s quantized path (on CUDA `nvllm.ops.fp8_gemm` takes batches of up
to 64 rows), in one graph for all batch sizes, so that a token's result does not depend on its batch's size.

Eager mode runs `nvllm.ops.linear_ops`' computation for fp8 weights, which quantizes inside, only where
`torch._scaled_mm` runs (everywhere with `quantize_activations`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nvllm.ops.fp8 import fp8_linear_reference, fp8_matmul, quantize_tokens, scaled_mm_of_quantized
from nvllm.ops.linear_ops import (
    add_bias,
    apply_linear,
    apply_linear_silu_mul,
    chosen_skinny_config,
    linear,
    linear_silu_mul,
    silu_mul,
    uses_skinny_matmul,
)
from nvllm.ops.op_library import inference_op, register_fake


def fp8_matmul_of_quantized(
    x: torch.Tensor,
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """`nvllm::scaled_mm`'s computation."""
    config = None if quantize_activations else chosen_skinny_config(x, weight)
    if config is not None:
        from nvllm.ops.skinny_matmul import skinny_matmul

        return add_bias(skinny_matmul(x.contiguous(), weight, config, weight_scale=weight_scale), bias)
    if not (x.is_cuda or quantize_activations):
        return add_bias(fp8_linear_reference(x, weight, weight_scale), bias)
    y = scaled_mm_of_quantized(x_q, x_scale, weight, weight_scale, x.dtype)
    return add_bias(y.view(*x.shape[:-1], weight.shape[0]), bias)


@inference_op("scaled_mm", mutates_args=())
def scaled_mm(
    x: torch.Tensor,
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """`x @ (weight * weight_scale[:, None])ᵀ + bias` of an fp8 weight, with `(x_q, x_scale)` =
    `quantize_tokens(x)`: the skinny kernel on x for a CUDA batch of at most 16 rows (unless
    `quantize_activations`), `torch._scaled_mm` or `nvllm.ops.fp8_gemm` on the quantized x otherwise; on
    the CPU the fp32 reference on x (on the quantized x with `quantize_activations`)."""
    return fp8_matmul_of_quantized(x, x_q, x_scale, weight, weight_scale, bias, quantize_activations)


@register_fake(scaled_mm)
def _(x, x_q, x_scale, weight, weight_scale, bias=None, quantize_activations=False):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def apply_fp8_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    quantize_activations: bool = False,
) -> torch.Tensor:
    """What the layers with fp8 weights call: in a compiled graph the traced quantization then
    `nvllm::scaled_mm`; in eager mode `apply_linear`'s computation, or with `quantize_activations` the
    quantized path's at every batch size."""
    if torch.compiler.is_compiling():
        # a graph of small batches' own (see the module's doc), unless they quantize too
        if not quantize_activations and uses_skinny_matmul(x):
            return linear(x, weight, bias, weight_scale)
        return scaled_mm(x, *quantize_tokens(x), weight, weight_scale, bias, quantize_activations)
    if quantize_activations:
        return add_bias(fp8_matmul(x, weight, weight_scale, quantize_activations=True), bias)
    return apply_linear(x, weight, bias, weight_scale)


def apply_fp8_linear_silu_mul(
    x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, quantize_activations: bool = False
) -> torch.Tensor:
    """`silu(gate) * up` of an fp8 packed `[gate; up]` weight's matmul. Compiled: traced after
    `nvllm::scaled_mm` (in fp32, rounded once), so inductor fuses it with the down projection's activation
    quantization; eager: `apply_linear_silu_mul`'s computation (with `quantize_activations`, on the
    quantized path's matmul)."""
    if torch.compiler.is_compiling():
        if not quantize_activations and uses_skinny_matmul(x):
            return linear_silu_mul(x, weight, weight_scale)
        return silu_mul(apply_fp8_linear(x, weight, weight_scale, None, quantize_activations))
    if quantize_activations:
        gate, up = apply_fp8_linear(x, weight, weight_scale, None, quantize_activations).chunk(2, -1)
        return F.silu(gate) * up
    return apply_linear_silu_mul(x, weight, weight_scale)
