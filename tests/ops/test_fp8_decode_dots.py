"""The decode kernel's dots over an fp8 cache (`fp8_dots`): the quantization against hand-computed values, the
torch reference of each mode against float attention within a bound its rounding explains, and the Triton
kernel in each mode against that reference in the interpreter (with the GPU's e4m3 conversion)."""

import math

import pytest
import torch

from nvllm.ops.fp8_decode_dots import FP8_DOTS, decode_reference, quantize_query
from nvllm.ops.fp8_kv_cache import FP8_KV
from nvllm.ops.torch_attention import decode_attention_with_lse
from tests.helpers.triton_interpreter import E4M3_CONVERSION_AS_ON_THE_GPU, run_in_interpreter

E4M3_HALF_STEP = 2**-4  # a normal e4m3 value is within 2^-4 of what it rounds (3 mantissa bits)
E4M3_SUBNORMAL_HALF_STEP = 2**-10  # below 2^-6 the step is a fixed 2^-9


def test_the_query_is_quantized_per_row_to_its_largest_element_at_448():
    query = torch.tensor([[1.0, -2.0, 0.5, 0.0], [3.0, 0.1, -0.0001, 1.5], [0.0, 0.0, 0.0, 0.0]])
    values, scales = quantize_query(query)
    assert scales.tolist() == pytest.approx([2 / 448, 3 / 448, 1.0])  # a zero row keeps scale 1
    assert values[0].tolist() == [224.0, -448.0, 112.0, 0.0]
    # 0.1 / (3/448) = 14.93 rounds to 15 (step 1 in [8, 16)); 0.0001 of 3 is a subnormal: 0.0149 to 2^-6
    assert values[1].tolist() == [448.0, 15.0, -(2**-6), 224.0]
    assert values[2].tolist() == [0.0] * 4


def test_the_query_rounds_within_e4m3_steps_of_its_scale():
    query = (
        torch.randn(64, 128, generator=torch.Generator().manual_seed(0)) * torch.logspace(-3, 1, 64)[:, None]
    )
    values, scales = quantize_query(query)
    error = (values * scales[:, None] - query).abs()
    bound = E4M3_HALF_STEP * query.abs() + E4M3_SUBNORMAL_HALF_STEP * scales[:, None]
    assert (error <= bound * (1 + 1e-6)).all() and error.max() > 0


def paged_case(lengths, seed, kv_heads=2, group=2, head_dim=32, block_size=128):
    """Random fp8 caches (K and V of standard deviation 2), block tables, lengths, bf16 queries, scale."""
    generator = torch.Generator().manual_seed(seed)
    width = max(math.ceil(length / block_size) for length in lengths)
    shape = (len(lengths) * width, block_size, kv_heads, head_dim)
    k_cache, v_cache = [(2 * torch.randn(shape, generator=generator)).to(FP8_KV) for _ in range(2)]
    tables = torch.randperm(len(lengths) * width, generator=generator).view(len(lengths), width).int()
    query = torch.randn(len(lengths), kv_heads * group, head_dim, generator=generator).to(torch.bfloat16)
    return query, k_cache, v_cache, torch.tensor(lengths, dtype=torch.int32), tables, head_dim**-0.5


def rounding_bounds(query, k_cache, v_cache, seqlens, tables, scale, fp8_dots):
    """Per (row, head), how far a mode's output and log-sum-exp may be from float attention over the same
    cache, from e4m3's steps alone:
    - the query's rounding moves each score by at most eps = scale * sum_j (2^-4 |q_j| + 2^-10 s) |k_j|
      (s the row's scale); weights `exp(score)` normalised then move by a factor within exp(+-2 eps), so the
      output by at most (exp(2 eps) - 1) max|v| and the log-sum-exp by eps;
    - "qk_pv" rounds each weight w (against a running maximum, so w <= 1 against the final one too) by at
      most 2^-4 w + 2^-18 (the subnormals' half step over the scale 256); over a normaliser l >= 1 the
      output moves by at most exp(2 eps) 2^-4 sum w|v| / l + 2^-18 sum |v|."""
    out_bounds, lse_bounds = torch.zeros(query.shape[:2]), torch.zeros(query.shape[:2])
    group = query.shape[1] // k_cache.shape[2]
    _, scales = quantize_query(query)
    for row, length in enumerate(seqlens.tolist()):
        blocks = tables[row].long()
        keys = k_cache[blocks].flatten(0, 1)[:length].float().repeat_interleave(group, 1)
        values = v_cache[blocks].flatten(0, 1)[:length].float().repeat_interleave(group, 1)
        query_error = (
            E4M3_HALF_STEP * query[row].float().abs() + E4M3_SUBNORMAL_HALF_STEP * scales[row, :, None]
        )
        eps = scale * torch.einsum("hd,khd->hk", query_error, keys.abs()).amax(1)
        v_max = values.abs().amax((0, 2))
        out_bounds[row] = (torch.exp(2 * eps) - 1) * v_max
        lse_bounds[row] = eps
        if fp8_dots == "qk_pv":
            scores = torch.einsum("hd,khd->hk", query[row].float(), keys) * scale
            weights = torch.softmax(scores, 1)  # w / l
            weighted = torch.einsum("hk,khd->hd", weights, values.abs())
            out_bounds[row] += torch.exp(2 * eps) * E4M3_HALF_STEP * weighted.amax(1)
            out_bounds[row] += 2**-18 * values.abs().sum((0, 2))
    return out_bounds, lse_bounds


@pytest.mark.parametrize("fp8_dots", ["qk", "qk_pv"])
def test_each_mode_is_float_attention_within_its_rounding(fp8_dots):
    case = paged_case([1, 63, 64, 65, 300, 700], seed=1)
    out, lse = decode_reference(*case, fp8_dots, num_splits=2, block_n=64)
    exact_out, exact_lse = decode_attention_with_lse(case[0].float(), *case[1:])
    out_bounds, lse_bounds = rounding_bounds(*case, fp8_dots)
    out_errors = (out - exact_out).abs().amax(-1)
    assert (out_errors <= out_bounds + 1e-5).all() and out_errors.max() > 1e-3  # it rounded, within bounds
    assert ((lse - exact_lse).abs() <= lse_bounds + 1e-5).all()


def test_a_mode_over_a_16_bit_cache_or_an_unknown_mode_is_a_value_error():
    from nvllm.ops.paged_decode_attention import paged_decode_attention

    query, k_cache, v_cache, seqlens, tables, scale = paged_case([5], seed=2)
    bf16 = (k_cache.to(torch.bfloat16), v_cache.to(torch.bfloat16))
    with pytest.raises(ValueError, match="fp8_dots='qk' reads an fp8 KV cache"):
        paged_decode_attention(query, *bf16, seqlens, tables, scale, fp8_dots="qk")
    with pytest.raises(ValueError, match="fp8_dots='fp8': expected one of none, qk, qk_pv"):
        paged_decode_attention(query, k_cache, v_cache, seqlens, tables, scale, fp8_dots="fp8")


def test_the_triton_kernel_in_each_mode_is_its_reference_in_the_interpreter():
    """At lengths on the 64-token tile's edges, whole and in KV splits, a group of 2 query heads padded to
    16 rows (the padding's zero rows must not turn into NaN scales). The output is bf16: one rounding of
    the reference's (2^-8 relative, a last-bit tie either way)."""
    run_in_interpreter(
        E4M3_CONVERSION_AS_ON_THE_GPU
        + f"""
import torch
from nvllm.ops.fp8_decode_dots import decode_reference
from nvllm.ops.paged_decode_attention import paged_decode_attention
from tests.ops.test_fp8_decode_dots import paged_case

case = paged_case([1, 63, 64, 65, 300], seed=3)
for fp8_dots in {list(FP8_DOTS)}:
    for splits in (1, 4):
        out, lse = paged_decode_attention(*case, splits, 64, fp8_dots=fp8_dots)
        expected_out, expected_lse = decode_reference(*case, fp8_dots, splits, 64)
        torch.testing.assert_close(out.float(), expected_out, atol=1e-3, rtol=2**-7, msg=fp8_dots)
        torch.testing.assert_close(lse, expected_lse, atol=1e-5, rtol=1e-5, msg=fp8_dots)
"""
    )
