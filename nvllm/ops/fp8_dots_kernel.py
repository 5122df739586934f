"""The Triton side of the fp8 dots' quantization (`nvllm.ops.fp8_dots`, whose torch functions round alike)."""

from __future__ import annotations

import triton
import triton.language as tl

from nvllm.ops import fp8_dots

# constexprs: the kernels may read globals of that kind only
E4M3_MAX = tl.constexpr(fp8_dots.E4M3_MAX)
WEIGHT_SCALE = tl.constexpr(fp8_dots.WEIGHT_SCALE)


@triton.jit
def quantized_query(query):
    """`query` `[rows, head_dim]` in e4m3, each row scaled by its own `amax / 448` (a zero row by 1), and the
    scales (fp32). IEEE divisions, as torch's, so both round the same values."""
    query = query.to(tl.float32)
    amax = tl.max(tl.abs(query), 1)
    query_scale = tl.where(amax > 0, tl.math.div_rn(amax, E4M3_MAX), 1.0)
    quantized = tl.math.div_rn(query, query_scale[:, None]).to(tl.float8e4nv)
    return quantized, query_scale


@triton.jit
def quantized_weights(weights):
    """Softmax weights in [0, 1] times WEIGHT_SCALE in e4m3 (exact scaling, then one rounding)."""
    return (weights * WEIGHT_SCALE).to(tl.float8e4nv)
