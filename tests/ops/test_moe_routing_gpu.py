"""The fused routing kernel on the GPU: Qwen3-30B-A3B's router (128 experts, 8 a token, bf16 logits) against
the torch routing and `align_by_expert` at decode batch sizes, and replayed in a CUDA graph with other
logits and another padding mask (no host sync, sizes from the shapes alone); the same for the routing
kernel of larger batches (`route_tokens`, a program per block of tokens) at decode and prefill sizes; and the
sort by expert in chunks against the sort in one launch.
`python -m pytest -m gpu tests/ops/test_moe_routing_gpu.py`."""

from __future__ import annotations

import pytest
import torch

from nvllm.ops.moe_routing import route_step

pytestmark = pytest.mark.gpu

NUM_EXPERTS, TOP_K = 128, 8


def decode_routing(num_tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator("cuda").manual_seed(seed)
    logits = torch.randn(num_tokens, NUM_EXPERTS, generator=generator, device="cuda").to(torch.bfloat16)
    padding = torch.rand(num_tokens, generator=generator, device="cuda") < 0.3
    return logits, padding


@pytest.mark.parametrize("num_tokens", [1, 2, 7, 64])
def test_the_fused_routing_equals_route_and_align(num_tokens):
    from nvllm.ops.moe_align_triton import align_by_expert
    from nvllm.ops.moe_route_triton import route_and_align  # needs triton: CUDA machines only
    from nvllm.ops.moe_tiles import row_tile

    logits, padding = decode_routing(num_tokens, seed=num_tokens)
    block_m = row_tile(num_tokens * TOP_K, NUM_EXPERTS)
    weights, ids, sorted_pairs, tile_expert = route_and_align(logits, padding, TOP_K, True, block_m)
    expected_weights, expected_ids = route_step(logits, padding, TOP_K, True)
    assert torch.equal(ids, expected_ids)
    # torch's softmax may differ in the last fp32 bit, which can round a weight to the next bf16 value
    torch.testing.assert_close(weights, expected_weights, atol=0, rtol=2**-7)
    expected_pairs, expected_tiles = align_by_expert(expected_ids, NUM_EXPERTS, block_m)
    assert torch.equal(sorted_pairs, expected_pairs) and torch.equal(tile_expert, expected_tiles)


def test_the_fused_routing_replays_in_a_cuda_graph():
    from nvllm.ops.moe_route_triton import route_and_align  # needs triton: CUDA machines only

    logits, padding = decode_routing(64, seed=1)
    route_and_align(logits, padding, TOP_K, True, 16)  # compile the kernel outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = route_and_align(logits, padding, TOP_K, True, 16)
    new_logits, new_padding = decode_routing(64, seed=2)
    logits.copy_(new_logits), padding.copy_(new_padding)
    graph.replay()
    for ours, eager in zip(outputs, route_and_align(logits, padding, TOP_K, True, 16), strict=True):
        assert torch.equal(ours, eager)


@pytest.mark.parametrize("num_tokens", [65, 256, 1024, 8191])
def test_the_routing_of_large_batches_equals_route_step(num_tokens):
    from nvllm.ops.moe_route_tokens_triton import route_tokens  # needs triton: CUDA machines only

    logits, padding = decode_routing(num_tokens, seed=num_tokens)
    weights, ids = route_tokens(logits, padding, TOP_K, True)
    expected_weights, expected_ids = route_step(logits, padding, TOP_K, True)
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(weights, expected_weights, atol=0, rtol=2**-7)


def test_the_routing_of_large_batches_replays_in_a_cuda_graph():
    from nvllm.ops.moe_route_tokens_triton import route_tokens  # needs triton: CUDA machines only

    logits, padding = decode_routing(256, seed=1)
    route_tokens(logits, padding, TOP_K, True)  # compile the kernel outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = route_tokens(logits, padding, TOP_K, True)
    new_logits, new_padding = decode_routing(256, seed=2)
    logits.copy_(new_logits), padding.copy_(new_padding)
    graph.replay()
    for ours, eager in zip(outputs, route_tokens(logits, padding, TOP_K, True), strict=True):
        assert torch.equal(ours, eager)
    assert torch.equal(outputs[1], route_step(logits, padding, TOP_K, True)[1])


@pytest.mark.parametrize("num_tokens", [64, 1000, 4096])
def test_the_sort_in_chunks_equals_the_sort_in_one_launch(num_tokens, monkeypatch):
    """`align_by_expert` both ways (`ALIGN_IN_CHUNKS_MIN_PAIRS`) on the GPU, at a prefill's row tile and a
    decode batch's, with padding tokens routed to no expert: the same layout to the element."""
    from nvllm.ops import moe_align_triton  # needs triton: CUDA machines only
    from nvllm.ops.moe_tiles import row_tile

    logits, padding = decode_routing(num_tokens, seed=num_tokens)
    _, ids = route_step(logits, padding, TOP_K, True)
    for block_m in sorted({16, row_tile(ids.numel(), NUM_EXPERTS, quantized_activations=True)}):
        layouts = []
        for threshold in (10**9, 0):
            monkeypatch.setattr(moe_align_triton, "ALIGN_IN_CHUNKS_MIN_PAIRS", threshold)
            layouts.append(moe_align_triton.align_by_expert(ids, NUM_EXPERTS, block_m))
        (pairs, tiles), (chunked_pairs, chunked_tiles) = layouts
        assert torch.equal(pairs, chunked_pairs) and torch.equal(tiles, chunked_tiles), block_m
