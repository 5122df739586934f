"""The fused routing kernel of small CUDA batches (`nvllm.ops.moe_route_triton`), in Triton's interpreter:
its weights, experts, sorted pairs and tile experts against the torch routing (`route`, then
`padding_to_no_expert`) and `align_by_expert` over token counts, expert counts, top-k, ties, padding rows
and renormalisation; the same for the routing kernel of larger batches (`nvllm.ops.moe_route_tokens_triton`,
a program per block of tokens); the experts through them against the torch reference on both sides of the
fused kernel's limit."""

from __future__ import annotations

import pytest

from tests.helpers.triton_interpreter import run_in_interpreter


def test_the_fused_routing_equals_route_padding_and_align():
    run_in_interpreter(
        """
import torch
from tests.helpers.routing_cases import COMBINATIONS, router_logits
from nvllm.ops.moe_route_triton import route_and_align
from nvllm.ops.moe_routing import route_step
from nvllm.ops.moe_tiles import row_tile
from nvllm.ops.moe_align_triton import align_by_expert
generator = torch.Generator().manual_seed(0)
# (tokens, experts, top-k): a single stream, a padded pair, an odd batch, the largest fused batch of
# Qwen3-MoE's 128 experts, and smaller routers
shapes = [(1, 8, 2), (2, 16, 4), (7, 128, 8), (64, 128, 8), (64, 8, 2), (7, 16, 4)]
combinations = COMBINATIONS


def group(combination):  # one of four groups of four, each taking both values of every setting
    dtype, renormalize, logits_kind, padded = combination
    return 2 * ((dtype == torch.bfloat16) ^ (logits_kind == "ties")) + (renormalize ^ padded)


# the interpreter is slow, each of its programs routing every token: the smaller routers' four shapes take
# a group each (all combinations between them), the larger router's two shapes two opposite combinations each
small_shapes = [shape for shape in shapes if shape[1] != 128]
large_shapes = [shape for shape in shapes if shape[1] == 128]
opposites = [combinations[::15], combinations[5:11:5]]  # each pair takes both values of every setting
cases = [
    (shape, *combination)
    for shape in shapes
    for combination in combinations
    if (
        combination in opposites[large_shapes.index(shape)]
        if shape in large_shapes
        else group(combination) == small_shapes.index(shape)
    )
]
for (tokens, experts, top_k), dtype, renormalize, logits_kind, padded in cases:
    logits = router_logits(tokens, experts, dtype, logits_kind, generator)
    padding = None
    if padded:  # the last rows are padding (a single stream's only row too), and one in the middle
        padding = torch.arange(tokens) >= tokens - tokens // 3 - 1
        padding[tokens // 2] |= tokens > 2
    case = (tokens, experts, top_k, dtype, renormalize, logits_kind, padded)
    block_m = row_tile(tokens * top_k, experts)
    weights, ids, sorted_pairs, tile_expert = route_and_align(logits, padding, top_k, renormalize, block_m)
    expected_weights, expected_ids = route_step(logits, padding, top_k, renormalize)
    expected_pairs, expected_tiles = align_by_expert(expected_ids, experts, block_m)
    assert ids.dtype == expected_ids.dtype and torch.equal(ids, expected_ids), case
    assert weights.dtype == expected_weights.dtype, case
    # the softmax's and the renormalising sum's order may differ from torch's in the last bit; and the
    # interpreter truncates a cast to bf16 where the GPU rounds it to nearest: one bf16 step at most
    rtol = 1e-6 if dtype == torch.float32 else 2**-7
    torch.testing.assert_close(weights, expected_weights, atol=0, rtol=rtol, msg=lambda m: f"{case}: {m}")
    assert torch.equal(sorted_pairs, expected_pairs), case
    assert torch.equal(tile_expert, expected_tiles), case
# a NaN logit makes its row's probabilities NaN, which the stable sort puts first: experts 0, 1, 2
logits = torch.randn(3, 8, generator=generator)
logits[1, 5] = float("nan")
weights, ids, sorted_pairs, _ = route_and_align(logits, None, 3, True, 16)
expected_weights, expected_ids = route_step(logits, None, 3, True)
assert torch.equal(ids, expected_ids) and ids[1].tolist() == [0, 1, 2], ids
torch.testing.assert_close(weights, expected_weights, equal_nan=True)
assert torch.equal(sorted_pairs, align_by_expert(expected_ids, 8, 16)[0])
"""
    )


def test_the_routing_of_large_batches_equals_route_and_padding():
    run_in_interpreter(
        """
import torch
from tests.helpers.routing_cases import COMBINATIONS, router_logits
from nvllm.ops.moe_route_tokens_triton import route_tokens, routing_block_tokens
from nvllm.ops.moe_routing import route_step
generator = torch.Generator().manual_seed(0)
# (tokens, experts, top-k): one token past the fused limit of 128 experts, a decode batch of 300 rows and
# a prefill of 1000; blocks that do not divide them (the last one partly outside the batch)
shapes = [(65, 128, 8), (300, 128, 8), (1000, 128, 2), (65, 8, 2), (300, 8, 8), (1000, 8, 2)]
assert routing_block_tokens(128) == 16 and routing_block_tokens(8) == 256
combinations = COMBINATIONS


def half(combination):  # one of two halves, each taking both values of every setting
    dtype, renormalize, logits_kind, padded = combination
    return (dtype == torch.bfloat16) ^ renormalize ^ (logits_kind == "ties") ^ padded


# each shape a half of the combinations, alternately: each router's three shapes take all of them
cases = [
    (shape, *combination)
    for index, shape in enumerate(shapes)
    for combination in combinations
    if half(combination) == index % 2
]
for (tokens, experts, top_k), dtype, renormalize, logits_kind, padded in cases:
    logits = router_logits(tokens, experts, dtype, logits_kind, generator)
    padding = None
    if padded:  # the last rows are padding, and rows in other blocks than the first token's
        padding = torch.arange(tokens) >= tokens - tokens // 3 - 1
        padding[tokens // 2] = padding[17] = True
    case = (tokens, experts, top_k, dtype, renormalize, logits_kind, padded)
    weights, ids = route_tokens(logits, padding, top_k, renormalize)
    expected_weights, expected_ids = route_step(logits, padding, top_k, renormalize)
    assert ids.dtype == expected_ids.dtype and torch.equal(ids, expected_ids), case
    assert weights.dtype == expected_weights.dtype, case
    # as the fused kernel's: the last fp32 bit, and the interpreter's truncating cast to bf16
    rtol = 1e-6 if dtype == torch.float32 else 2**-7
    torch.testing.assert_close(weights, expected_weights, atol=0, rtol=rtol, msg=lambda m: f"{case}: {m}")
# a NaN logit makes its row's probabilities NaN, which the stable sort puts first: experts 0, 1, 2; a
# padding row's NaN changes nothing (no expert, 8)
logits = torch.randn(70, 8, generator=generator)
logits[0, 3] = logits[40, 5] = logits[65, 1] = float("nan")
padding = torch.arange(70) >= 60
weights, ids = route_tokens(logits, padding, 3, True)
expected_weights, expected_ids = route_step(logits, padding, 3, True)
assert torch.equal(ids, expected_ids) and ids[40].tolist() == [0, 1, 2] and ids[65].tolist() == [8] * 3, ids
assert weights[60:].eq(0).all()
torch.testing.assert_close(weights, expected_weights, equal_nan=True)
# an empty batch: nothing launched, empty outputs
weights, ids = route_tokens(torch.zeros(0, 8), None, 2, True)
assert weights.shape == ids.shape == (0, 2)
"""
    )


def test_the_experts_through_the_fused_routing_equal_the_torch_reference():
    run_in_interpreter(
        """
import torch
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_route_triton import fits_fused_routing, routed_experts
from nvllm.ops.moe_routing import route_step
generator = torch.Generator().manual_seed(0)
# (tokens, experts, top-k, hidden, intermediate): fused routing, then batches past its limit (routed a
# block of tokens a program)
shapes = [(5, 8, 2, 64, 48), (1, 16, 4, 32, 16), (300, 32, 2, 32, 16), (65, 128, 8, 32, 16)]
assert [fits_fused_routing(tokens, experts) for tokens, experts, *_ in shapes] == [True, True, False, False]
for tokens, experts, top_k, hidden, intermediate in shapes:
    x = torch.randn(tokens, hidden, generator=generator)
    gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=generator) / hidden**0.5
    down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
    logits = torch.randn(tokens, experts, generator=generator)
    padding = torch.arange(tokens) >= tokens - 1
    for step_padding in (None, padding):
        expected = experts_reference(x, gate_up, down, *route_step(logits, step_padding, top_k, True))
        ours = routed_experts(x, gate_up, down, logits, step_padding, top_k, True)
        torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    assert ours[-1].eq(0).all() if tokens > 1 else True
"""
    )


def test_the_fused_routing_takes_decode_batches_of_128_experts_and_refuses_more():
    pytest.importorskip("triton")
    import torch

    from nvllm.ops.moe_route_triton import fits_fused_routing, route_and_align

    assert fits_fused_routing(64, 128) and fits_fused_routing(1, 128) and fits_fused_routing(1024, 8)
    assert not fits_fused_routing(65, 128) and not fits_fused_routing(0, 128)
    with pytest.raises(ValueError, match="65 tokens of 128 experts do not fit"):
        route_and_align(torch.zeros(65, 128), None, top_k=8, renormalize=True, block_m=16)


def test_the_routing_of_large_batches_refuses_a_top_k_beyond_the_experts():
    pytest.importorskip("triton")
    import torch

    from nvllm.ops.moe_route_tokens_triton import route_tokens

    with pytest.raises(ValueError, match="top_k must be between 1 and the 8 experts, got 9"):
        route_tokens(torch.zeros(100, 8), None, top_k=9, renormalize=True)
