"""FP8 weights (`model.quantization=fp8`): a matrix stored in float8 e4m3, each output channel (row) with its
own fp32 scale, so that `W ≈ q * scale[:, None]`.

The layers quantize their weights as they load (`nvllm.layers.linear`); `nvllm.ops.fp8_linear_ops`
(compiled) and `nvllm.ops.linear_ops` (eager) pick the kernel by batch size. A row's scale is its largest
magnitude over e4m3's largest finite value (448), so each row uses the whole range of the format. A scale
belongs to an output channel, so it comes out of the dot product, `x @ Wᵀ = (x @ qᵀ) * scale`: the matmul
reads the weight in fp8 and scales its result.

- **A batch of at most 16 rows on CUDA (decode)** runs the skinny Triton kernel. It converts the fp8 weight
  to the activations' dtype, which e4m3 values are exactly, so only the weight was rounded. With
  `model.fp8_activations` such batches quantize their activations too and take the larger batches' path.
- **A larger batch on CUDA** quantizes the activations too, a scale per token (`quantize_tokens`), and runs
  on the fp8 tensor cores: `torch._scaled_mm`, or up to 256 rows (decode) nvllm's Triton kernel
  (`nvllm.ops.fp8_gemm`, where its table says it is faster). In a compiled graph the quantization is traced
  code ahead of the matmul op, which inductor fuses into the kernel that produced the activations.
- **On the CPU** the weight is converted and the scale applied after the matmul, as the small-batch kernel
  does; with `model.fp8_activations`, the activations quantized as the GPU's are
  (`scaled_mm_reference`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(q, scale)`: `weight` `[..., rows, cols]` (a matrix, or a stack of them as MoE experts are) in float8
    e4m3 and a scale per row (fp32, `[..., rows]`), `weight ≈ q * scale[..., None]`. A row of zeros gets
    scale 1 (and stays zeros)."""
    amax = weight.abs().amax(dim=-1).float()
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (weight.float() / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scale


def quantize_groups(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(q, scale)`: `x` `[rows, width]` in float8 e4m3 with a scale per row and group of `group` consecutive
    columns (`[rows, ceil(width / group)]`; the last group may be narrower), each group scaled as
    `quantize_rows` scales a row."""
    rows, width = x.shape
    groups = -(-width // group)
    q, scale = quantize_rows(F.pad(x, (0, groups * group - width)).view(rows, groups, group))
    return q.flatten(1)[:, :width], scale


def dequantize_groups(q: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    """The fp32 matrix `quantize_groups(x, group)`'s `(q, scale)` stand for."""
    return q.float() * scale.repeat_interleave(group, dim=1)[:, : q.shape[1]]


def dequantized(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The matrix `q * scale[:, None]` the fp8 weight stands for, in `dtype`."""
    return (q.float() * scale[:, None]).to(dtype)


def fp8_linear_reference(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`x @ (q * scale)ᵀ` as the small-batch kernel computes it: the product accumulated in fp32, scaled,
    then rounded once to x's dtype."""
    return (F.linear(x.float(), q.float()) * scale).to(x.dtype)


def quantize_tokens(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations `[..., width]` quantized as the weights are, a scale per token: `quantize_rows` of the
    `[tokens, width]` matrix. Compiled graphs trace it, so that inductor fuses it into x's producer."""
    return quantize_rows(x.reshape(-1, x.shape[-1]))


def scaled_mm_reference(
    x_q: torch.Tensor, x_scale: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """`(x_q * x_scale) @ (q * scale)ᵀ` as the fp8 tensor cores compute it: the product of the e4m3 values
    accumulated in fp32, scaled by both, rounded once to `out_dtype`."""
    return ((x_q.float() @ q.float().T) * x_scale[:, None] * scale).to(out_dtype)


def scaled_mm_of_quantized(
    x_q: torch.Tensor, x_scale: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """`(x_q * x_scale) @ (q * scale)ᵀ` `[tokens, out]` on the fp8 tensor cores, for `quantize_tokens`'s
    `(x_q, x_scale)`: by `torch._scaled_mm`, or with `nvllm.ops.fp8_gemm.ENABLED` the decode batches its
    `chosen_config` takes by nvllm's Triton kernel, whose tiles follow the batch (batches of at most 16
    rows, which come quantized only with `model.fp8_activations`, by its kernel for them); off CUDA,
    `scaled_mm_reference`."""
    if not x_q.is_cuda:
        return scaled_mm_reference(x_q, x_scale, q, scale, out_dtype)
    from nvllm.ops import fp8_gemm

    if fp8_gemm.ENABLED:
        m, n, k = x_q.shape[0], *q.shape
        config = fp8_gemm.chosen_config(m, n, k, fp8_gemm.device_sms(x_q.device))
        if config is not None:
            return fp8_gemm.fp8_gemm(x_q, x_scale, q, scale, out_dtype, config)
    return torch._scaled_mm(x_q, q.t(), scale_a=x_scale[:, None], scale_b=scale[None, :], out_dtype=out_dtype)


def scaled_mm_linear(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`x @ (q * scale)ᵀ` on the fp8 tensor cores: x quantized as the weights are, a scale per row (token)."""
    y = scaled_mm_of_quantized(*quantize_tokens(x), q, scale, x.dtype)
    return y.view(*x.shape[:-1], q.shape[0])


def fp8_matmul(
    x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, quantize_activations: bool = False
) -> torch.Tensor:
    """`x @ (q * scale)ᵀ` where the skinny kernel does not run: `scaled_mm_linear` on CUDA, and on the CPU
    with `quantize_activations`; otherwise the reference on x as it is."""
    if x.is_cuda or quantize_activations:
        return scaled_mm_linear(x, q, scale)
    return fp8_linear_reference(x, q, scale)
