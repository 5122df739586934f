"""The decode kernel's dots over an fp8 cache (`fp8_dots`): the quantization against hand-computed values, the
torch reference of each mode against float attention within a bound its rounding explains, and the Triton
kernel in each mode against that reference in the interpreter (with the GPU's e4m3 conversion)."""

import math

import pytest
import torch

from nvllm.ops.fp8_dots import FP8_DOTS, decode_reference, quantize_query
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


def query_its_dots_see(query, fp8_dots):
    """For "qk" and "qk_pv" the e4m3 query times its scale (within e4m3's steps of the query: the test
    above); the query itself (fp32) otherwise."""
    if fp8_dots not in ("qk", "qk_pv"):
        return query.float()
    values, scales = quantize_query(query)
    return values * scales[..., None]


def float_attention_of_its_query(query, k_cache, v_cache, seqlens, tables, scale, fp8_dots):
    """Float attention (fp32, the torch backend's) of the query a mode's dots see, so that the query's
    rounding is carried exactly, not bounded."""
    query = query_its_dots_see(query, fp8_dots)
    args = (t.cpu() for t in (query, k_cache, v_cache, seqlens, tables))
    return decode_attention_with_lse(*args, scale)


def weight_rounding_bounds(query, k_cache, v_cache, seqlens, tables, scale, fp8_dots, kernel=False):
    """Per (row, head), how far a mode's output may be from `float_attention_of_its_query`:
    - "qk_pv" rounds each weight w (against a running maximum: w <= 1 against the final maximum too) by at
      most 2^-4 w (e4m3's half step, relative) + 2^-18 (the subnormals' half step, 2^-10, over the scale
      256); over the normaliser l >= 1 (the largest weight is 1), output element d moves by at most
      2^-4 sum_i w_i |v_id| / l + 2^-18 sum_i |v_id|;
    - `kernel`: the kernel's own roundings, under 2^-7 max|v| together: its bf16 output (2^-9 of |out| <=
      max|v|), PV's weights in fp16 in the other modes (2^-11 of each), and in "qk" and "qk_pv" Hopper's fp8
      MMA, which keeps fewer bits than fp32 as it accumulates (about 14: a score off by some 2^-14 of
      scale * sum |q k|, near 15 at head_dim 128 for unit queries and K of deviation 2; that moves the
      output by about 2^-9 max|v|);
    - every other mode's arithmetic is float attention's up to fp32 rounding."""
    query = query_its_dots_see(query, fp8_dots)
    query, k_cache, v_cache, seqlens, tables = (t.cpu() for t in (query, k_cache, v_cache, seqlens, tables))
    bounds = torch.zeros(query.shape[:2])
    group = query.shape[1] // k_cache.shape[2]
    for row, length in enumerate(seqlens.tolist()):
        blocks = tables[row].long()
        keys = k_cache[blocks].flatten(0, 1)[:length].float().repeat_interleave(group, 1)
        values = v_cache[blocks].flatten(0, 1)[:length].float().abs().repeat_interleave(group, 1)
        if fp8_dots == "qk_pv":
            weights = torch.softmax(torch.einsum("hd,khd->hk", query[row].float(), keys) * scale, 1)  # w / l
            bounds[row] += E4M3_HALF_STEP * torch.einsum("hk,khd->hd", weights, values).amax(1)
            bounds[row] += 2**-18 * values.sum(0).amax(1)
        if kernel:
            bounds[row] += 2**-7 * values.amax((0, 2))
    return bounds


@pytest.mark.parametrize("fp8_dots", ["qk", "qk_pv"])
def test_each_mode_is_float_attention_of_its_rounded_query_within_its_weights_rounding(fp8_dots):
    case = paged_case([1, 63, 64, 65, 300, 700], seed=1)
    out, lse = decode_reference(*case, fp8_dots, num_splits=2, block_n=64)
    exact_out, exact_lse = float_attention_of_its_query(*case, fp8_dots)
    errors = (out - exact_out).abs().amax(-1)
    assert (errors <= weight_rounding_bounds(*case, fp8_dots) + 1e-5).all()
    torch.testing.assert_close(lse, exact_lse, atol=1e-5, rtol=1e-5)  # the weights' rounding leaves it
    if fp8_dots == "qk_pv":
        assert errors.max() > 1e-3  # the weights were rounded
    query_moved = (float_attention_of_its_query(*case, "none")[0] - exact_out).abs().max()
    assert query_moved > 1e-2  # and the query's rounding moved the output


def small_weights_case():
    """One token of score 8 and V 0, then 1,000 of score 0 and V 1: each of those weighs e^-8 = 3.4e-4 of the
    first, under half e4m3's smallest subnormal (2^-10), so unscaled they would round to zero and the output
    with them; times 256 they are normal e4m3 values (0.0859 to within 2^-4). Returns the kernel's arguments
    and float attention's output, 1000 e^-8 / (1 + 1000 e^-8)."""
    length, head_dim = 1001, 16
    k_cache, v_cache = torch.zeros(2, 4, 256, 1, head_dim)
    k_cache.view(-1, head_dim)[0, 0] = 8.0
    v_cache.view(-1, head_dim)[1:length] = 1.0
    query = torch.zeros(1, 2, head_dim)
    query[..., 0] = 1.0
    case = (query, k_cache.to(FP8_KV), v_cache.to(FP8_KV), torch.tensor([length]), torch.arange(4)[None], 1.0)
    small = 1000 * math.exp(-8)
    return case, small / (1 + small)


def test_qk_pv_keeps_weights_far_below_the_largest_instead_of_flushing_them():
    case, expected = small_weights_case()
    out, _ = decode_reference(*case, "qk_pv")
    assert out.flatten().tolist() == pytest.approx([expected] * out.numel(), rel=E4M3_HALF_STEP)


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
    the reference's (2^-8 relative, a last-bit tie either way). And the small weights' case in "qk_pv"."""
    run_in_interpreter(
        E4M3_CONVERSION_AS_ON_THE_GPU
        + f"""
import torch
from nvllm.ops.fp8_dots import decode_reference
from nvllm.ops.paged_decode_attention import paged_decode_attention
from tests.ops.test_fp8_dots import paged_case, small_weights_case

case = paged_case([1, 63, 64, 65, 300], seed=3)
for fp8_dots in {list(FP8_DOTS)}:
    for splits in (1, 4):
        out, lse = paged_decode_attention(*case, splits, 64, fp8_dots=fp8_dots)
        expected_out, expected_lse = decode_reference(*case, fp8_dots, splits, 64)
        torch.testing.assert_close(out.float(), expected_out, atol=1e-3, rtol=2**-7, msg=fp8_dots)
        torch.testing.assert_close(lse, expected_lse, atol=1e-5, rtol=1e-5, msg=fp8_dots)
small_weights, expected = small_weights_case()
out, _ = paged_decode_attention(*small_weights, 1, 64, fp8_dots="qk_pv")
torch.testing.assert_close(out, torch.full_like(out, expected), atol=0, rtol=2**-4)
"""
    )
