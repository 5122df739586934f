"""The skinny experts (`nvllm.ops.moe_skinny_triton`: a few tokens' experts in two launches, no sort) in
Triton's interpreter against the torch reference: given the routing and routing in their kernels, bf16's
place taken by fp32 and on fp8 experts, with padding tokens; and the CUDA entry points' choice of them."""

from __future__ import annotations

import pytest

from tests.helpers.triton_interpreter import run_in_interpreter


def test_the_skinny_experts_equal_the_torch_reference():
    """Sizes off every launch block (the masks), top-k not a power of two, renormalised or not; fp8
    experts whose rows and experts differ in magnitude, so that a scale applied to the wrong row, expert
    or pair shows; padding tokens add nothing and their rows are zeros."""
    run_in_interpreter(
        """
import torch
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_routing import route_step
from nvllm.ops import moe_skinny_triton
from nvllm.ops.moe_skinny_triton import skinny_experts
# wider strips than the tables' (the GPU test below runs theirs), for fewer programs in the interpreter; still
# a last strip and a last slice cut short by every shape's sizes
for table in (moe_skinny_triton.GATE_UP_LAUNCH, moe_skinny_triton.DOWN_LAUNCH):
    table[1] = table[2] = (32, 64, 4, 1)
generator = torch.Generator().manual_seed(0)
shapes = [(1, 8, 3, 96, 80, True), (3, 8, 2, 64, 48, False), (4, 6, 4, 300, 40, True)]
for tokens, experts, top_k, hidden, intermediate, renormalize in shapes:
    x = torch.randn(tokens, hidden, generator=generator)
    rows = 2 * intermediate
    gate_up = torch.randn(experts, rows, hidden, generator=generator) / hidden**0.5
    gate_up *= torch.logspace(-1, 1, rows)[torch.randperm(rows, generator=generator)][:, None]
    down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
    down *= torch.logspace(-1, 1, experts * hidden).view(experts, hidden, 1)
    logits = torch.randn(tokens, experts, generator=generator)
    padding = torch.arange(tokens) >= 2
    for pad in (None, padding):
        weights, ids = route_step(logits, pad, top_k, renormalize)
        expected = experts_reference(x, gate_up, down, weights, ids)
        exact = experts_reference(x.double(), gate_up.double(), down.double(), weights.double(), ids)
        # fp32 sums in another order than the reference's: no farther from the float64 result than it is
        reference_error = (expected.double() - exact).abs().max().item()
        given = skinny_experts(x, gate_up, down, top_k, routing=(weights, ids))
        routed = dict(router_logits=logits, padding=pad, renormalize=renormalize)
        here = skinny_experts(x, gate_up, down, top_k, **routed)
        for ours in (given, here):
            assert (ours.double() - exact).abs().max().item() <= 2 * reference_error + 1e-7
            if pad is not None:
                assert (ours[pad] == 0).all()
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    scales = dict(gate_up_scale=gate_up_scale, down_scale=down_scale)
    weights, ids = route_step(logits, None, top_k, renormalize)
    expected = experts_reference(x, gate_up_q, down_q, weights, ids, *scales.values())
    within = dict(atol=1e-5 * expected.abs().max().item(), rtol=1e-4)  # fp32 sums, in another order
    given = skinny_experts(x, gate_up_q, down_q, top_k, routing=(weights, ids), **scales)
    routed = dict(router_logits=logits, renormalize=renormalize)
    here = skinny_experts(x, gate_up_q, down_q, top_k, **routed, **scales)
    torch.testing.assert_close(given, expected, **within)
    torch.testing.assert_close(here, expected, **within)
# nvllm::routed_experts' CUDA path hands a single token of fp8 experts to them, and the result is theirs
# (routed in the kernels: `here`'s)
from nvllm.ops import moe_route_triton
calls = []
skinny = moe_route_triton.skinny_experts
moe_route_triton.skinny_experts = lambda *args, **kwargs: calls.append(1) or skinny(*args, **kwargs)
routing = (logits[:1], None, top_k, renormalize)
routed = moe_route_triton.routed_experts(x[:1], gate_up_q, down_q, *routing, *scales.values())
assert calls == [1]
torch.testing.assert_close(routed, here[:1], atol=0, rtol=0)
# routed first by `route_tokens` (SKINNY_ROUTES_IN_KERNELS off), then given to them: the same routing
moe_route_triton.SKINNY_ROUTES_IN_KERNELS = False
routed = moe_route_triton.routed_experts(x[:1], gate_up_q, down_q, *routing, *scales.values())
assert calls == [1, 1]
torch.testing.assert_close(routed, given[:1], atol=0, rtol=0)
"""
    )


def test_the_skinny_experts_take_a_few_tokens_by_the_experts_weight_dtype(monkeypatch):
    """The rule both CUDA entry points ask (`takes_skinny_experts`): batches of at most
    `SKINNY_EXPERTS_MAX_TOKENS[bytes an expert weight]` tokens, never fp8 activations, and 0 turns the path
    off; by default a single stream's graph (one token and its padding) takes it on fp8 experts. That
    `nvllm::routed_experts` follows it is checked in the interpreter above."""
    pytest.importorskip("triton")
    from nvllm.ops import moe_skinny_triton

    takes = moe_skinny_triton.takes_skinny_experts
    assert takes(1, 1, False) and takes(2, 1, False) and not takes(3, 1, False)
    assert not takes(1, 2, False)  # bf16 experts keep the grouped path
    limits = {1: 4, 2: 1}
    monkeypatch.setattr(moe_skinny_triton, "SKINNY_EXPERTS_MAX_TOKENS", limits)
    assert takes(4, 1, False) and takes(1, 2, False)
    assert not takes(0, 1, False) and not takes(5, 1, False) and not takes(2, 2, False)
    assert not takes(1, 4, False) and not takes(1, 1, True)
    limits[1] = 0
    assert not takes(1, 1, False)


@pytest.mark.gpu
@pytest.mark.parametrize("fp8", [False, True])
def test_on_the_gpu_the_skinny_experts_equal_the_grouped_ones_and_replay_in_a_graph(fp8):
    """Qwen3-30B-A3B's layer (hidden 2048, 128 experts of 768, 8 a token) at 1, 2 and 4 tokens, bf16: the
    skinny experts (routing given, and routed in the kernels with a padding token) against the grouped
    path, to the rounding of one bf16 output (the sums' order differs); then replayed in a CUDA graph on
    other inputs as the engine's decode graphs do."""
    import torch

    from nvllm.ops.fp8 import quantize_rows
    from nvllm.ops.moe_routing import route_step
    from nvllm.ops.moe_skinny_triton import skinny_experts
    from nvllm.ops.moe_triton import grouped_experts

    generator = torch.Generator("cuda").manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator, device="cuda") * scale).to(torch.bfloat16)

    gate_up, down, scales = randn(128, 1536, 2048, scale=0.02), randn(128, 2048, 768, scale=0.02), {}
    if fp8:
        (gate_up, gate_up_scale), (down, down_scale) = quantize_rows(gate_up), quantize_rows(down)
        scales = dict(gate_up_scale=gate_up_scale, down_scale=down_scale)
    for tokens in (1, 2, 4):
        x, logits = randn(tokens, 2048), randn(tokens, 128)
        padding = torch.arange(tokens, device="cuda") == tokens - 1 if tokens > 1 else None
        weights, ids = route_step(logits, padding, 8, True)
        expected = grouped_experts(x, gate_up, down, weights, ids, *scales.values())
        given = skinny_experts(x, gate_up, down, 8, routing=(weights, ids), **scales)
        here = skinny_experts(x, gate_up, down, 8, router_logits=logits, padding=padding, **scales)
        for ours in (given, here):
            torch.testing.assert_close(ours, expected, atol=2e-3 * expected.abs().max().item(), rtol=2**-7)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = skinny_experts(x, gate_up, down, 8, router_logits=logits, padding=padding, **scales)
    x.copy_(randn(*x.shape)), logits.copy_(randn(*logits.shape))
    graph.replay()
    eager = skinny_experts(x, gate_up, down, 8, router_logits=logits, padding=padding, **scales)
    assert torch.equal(replayed, eager)
