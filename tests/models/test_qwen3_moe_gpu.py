"""Qwen3-MoE on the GPU: the Triton grouped matmuls against the torch reference within bf16 noise (eager, on
fp8 experts too, and replayed in a CUDA graph, which they must allow: no host sync), and the engine on a small
random MoE checkpoint against transformers in fp32 with the near-tie rule (tests/helpers/gpu_parity.py).
`python -m pytest -m gpu tests/models/test_qwen3_moe_gpu.py`."""

from __future__ import annotations

import pytest
import torch

from experiments.harness.parity import precision_noise
from nvllm import LLM
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_routing import route
from tests.helpers.family_checkpoints import write_family_checkpoint
from tests.helpers.gpu_parity import assert_follows_transformers_up_to_bf16
from tests.helpers.parallel_oracle import relative_error, whole_relative_error

pytestmark = pytest.mark.gpu

# one layer of Qwen3-30B-A3B: hidden 2048, 128 experts of 768, 8 a token
HIDDEN, NUM_EXPERTS, TOP_K, INTERMEDIATE = 2048, 128, 8, 768


def layer_inputs(num_tokens: int, seed: int):
    generator = torch.Generator("cuda").manual_seed(seed)

    def normal(*shape, std):
        return torch.randn(*shape, generator=generator, device="cuda") * std

    x = normal(num_tokens, HIDDEN, std=1.0)
    gate_up = normal(NUM_EXPERTS, 2 * INTERMEDIATE, HIDDEN, std=HIDDEN**-0.5)
    down = normal(NUM_EXPERTS, HIDDEN, INTERMEDIATE, std=INTERMEDIATE**-0.5)
    weights, ids = route(normal(num_tokens, NUM_EXPERTS, std=1.0), TOP_K, renormalize=True)
    return x, gate_up, down, weights, ids


@pytest.mark.parametrize("pairs_in_bf16", [False, True])
@pytest.mark.parametrize("num_tokens", [1, 3, 64, 256, 4096])
def test_the_grouped_matmuls_equal_the_reference_within_bf16_noise(num_tokens, pairs_in_bf16, monkeypatch):
    """Decode batches (a few rows an expert, the smallest tile) and prefill (many, larger tiles); the pairs'
    outputs in fp32 or in bf16 (`moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`)."""
    from nvllm.ops import moe_tiles
    from nvllm.ops.moe_triton import grouped_experts  # needs triton: CUDA machines only

    monkeypatch.setattr(moe_tiles, "PAIR_OUTPUTS_IN_INPUT_DTYPE", pairs_in_bf16)

    fp32 = layer_inputs(num_tokens, seed=num_tokens)
    bf16 = [t.to(torch.bfloat16) if t.is_floating_point() else t for t in fp32]
    # the bf16-rounded inputs computed in fp32 (the expert ids stay integers)
    exact = experts_reference(*[t.float() if t.is_floating_point() else t for t in bf16])
    reference = experts_reference(*bf16).float()
    ours = grouped_experts(*bf16).float()
    assert relative_error(ours, exact) <= 1.5 * relative_error(reference, exact) + 1e-3
    assert precision_noise(ours, exact) <= 2 * precision_noise(reference, exact) + 1e-2


@pytest.mark.parametrize("pairs_in_bf16", [False, True])
@pytest.mark.parametrize("num_tokens", [1, 64, 256, 4096])
def test_the_grouped_matmuls_on_fp8_experts_equal_the_reference_within_bf16_noise(
    num_tokens, pairs_in_bf16, monkeypatch
):
    """The experts quantized a scale per row (`model.quantization=fp8`): the kernels, on bf16 activations,
    against the reference's fp32 product with the same fp8 experts, no further from it than the reference
    computed in bf16; the pairs' outputs in fp32 or in bf16."""
    from nvllm.ops import moe_tiles
    from nvllm.ops.moe_triton import grouped_experts  # needs triton: CUDA machines only

    monkeypatch.setattr(moe_tiles, "PAIR_OUTPUTS_IN_INPUT_DTYPE", pairs_in_bf16)

    x, gate_up, down, weights, ids = layer_inputs(num_tokens, seed=num_tokens)
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    x, weights = x.to(torch.bfloat16), weights.to(torch.bfloat16)
    exact = experts_reference(x.float(), gate_up_q, down_q, weights.float(), ids, gate_up_scale, down_scale)
    reference = experts_reference(x, gate_up_q, down_q, weights, ids, gate_up_scale, down_scale).float()
    ours = grouped_experts(x, gate_up_q, down_q, weights, ids, gate_up_scale, down_scale).float()
    assert relative_error(ours, exact) <= 1.5 * relative_error(reference, exact) + 1e-3
    assert precision_noise(ours, exact) <= 2 * precision_noise(reference, exact) + 1e-2


@pytest.mark.parametrize(
    "per_row, pairs_in_bf16, promoted",
    [(False, False, True), (True, False, True), (True, True, True), (True, False, False)],
)
@pytest.mark.parametrize("num_tokens", [1, 3, 64, 256, 4096])
def test_the_grouped_matmuls_on_fp8_activations_equal_the_reference(
    num_tokens, per_row, pairs_in_bf16, promoted, monkeypatch
):
    """fp8 experts on fp8 activations (`model.fp8_activations`) against the torch reference of the same
    quantization. They differ by the order of fp32 sums (and the fp8 MMA's accumulation), and by the
    elements of the intermediate whose e4m3 rounding that flips: far less than the activations'
    quantization itself moves the result (the same experts on bf16 activations). The references run on the
    CPU: on the H200 the same reference computed on CUDA was 2.9 % from its CPU result at 64 tokens, where
    the kernels were 0.7 % from it (experiments/results/2026-12-05-moe-skinny-experts-fp8-activations.md).

    Where each slice's sums are promoted to fp32 (`promoted`, `moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32`), the
    whole output is held to a quarter of the bf16 activations' distance, at most 1 %, and each token
    to half of theirs: a flipped rounding moves an element by a whole e4m3 step, so the worst of many tokens
    grows with their number for the same arithmetic (relative noise of 1e-5 on the intermediate: the worst
    token 0.33 % from the reference at 64 tokens, 1.17 % at 4,096, the whole output 0.09 % and 0.12 %;
    experiments/results/2026-12-05-cpu-fp8-activation-error-by-rows.md), while a fault confined to a few
    rows moves them far more than that. `per_row`: the intermediate quantized a scale per row
    (`moe_tiles.FP8_INTERMEDIATE_PER_ROW`), the reference so too; `pairs_in_bf16`: the pairs' outputs
    rounded to bf16 before their sum (`moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`), the reference's too.

    Accumulated in the tensor cores' fewer bits over the whole loop instead, the kernels part from the
    reference's fp32 sums by about 1.2 % at every batch, twice as far as promoted
    (experiments/results/2026-12-06-h100-fp8-sums-and-small-kernels.md): an error of their own, uncorrelated
    with the quantization's (about 5 %), which they would add to in quadrature. So they are held against the
    fp8 experts on unquantized activations computed in fp32: no further from it than the reference is, but
    for 5 % more over the whole output (an accumulation error up to a third of the quantization's) and 10 %
    for the worst token."""
    from nvllm.ops import moe_tiles
    from nvllm.ops.moe_triton import grouped_experts  # needs triton: CUDA machines only

    monkeypatch.setattr(moe_tiles, "FP8_INTERMEDIATE_PER_ROW", per_row)
    monkeypatch.setattr(moe_tiles, "PAIR_OUTPUTS_IN_INPUT_DTYPE", pairs_in_bf16)
    monkeypatch.setattr(moe_tiles, "FP8_ACTIVATION_SUMS_IN_FP32", promoted)

    x, gate_up, down, weights, ids = layer_inputs(num_tokens, seed=num_tokens)
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    x, weights = x.to(torch.bfloat16), weights.to(torch.bfloat16)
    experts = (gate_up_q, down_q, weights, ids, gate_up_scale, down_scale)
    ours = grouped_experts(x, *experts, True).float().cpu()
    x, gate_up_q, down_q, weights, *rest = (t.cpu() for t in (x, *experts))
    reference = experts_reference(x, gate_up_q, down_q, weights, *rest, quantize_activations=True).float()
    on_bf16_activations = experts_reference(x.float(), gate_up_q, down_q, weights.float(), *rest)
    if promoted:
        bound = min(1e-2, 0.25 * whole_relative_error(on_bf16_activations, reference))
        assert whole_relative_error(ours, reference) <= bound
        assert relative_error(ours, reference) <= 0.5 * relative_error(on_bf16_activations, reference)
    else:
        exact, quantized = on_bf16_activations.float(), whole_relative_error(reference, on_bf16_activations)
        assert whole_relative_error(ours, exact) <= 1.05 * quantized
        assert relative_error(ours, exact) <= 1.1 * relative_error(reference, exact)


@pytest.mark.parametrize("switch", ["GATE_UP_IN_FP16", "DOWN_IN_FP16"])
@pytest.mark.parametrize("num_tokens", [3, 64, 256, 4096])
def test_fp16_rows_give_what_bf16_rows_give(num_tokens, switch, monkeypatch):
    """fp8 experts with `switch` (gate/up's or down's input as fp16 rows) on and off, on bf16 tokens of which
    one is beyond fp16's range (and so is its intermediate row): the products are exact either way, so the
    two differ only by the order of fp32 sums inside the MMAs, which moves an element by at most one bf16
    step after the rounding (2^-8 of it)."""
    from nvllm.ops import moe_triton  # needs triton: CUDA machines only

    x, gate_up, down, weights, ids = layer_inputs(num_tokens, seed=num_tokens)
    x[0] *= 1e5
    x, weights = x.to(torch.bfloat16), weights.to(torch.bfloat16)
    assert x[0].float().abs().max() > 65504
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    layer = (x, gate_up_q, down_q, weights, ids, gate_up_scale, down_scale)
    monkeypatch.setattr(moe_triton, switch, False)
    on_bf16 = moe_triton.grouped_experts(*layer).float()
    monkeypatch.setattr(moe_triton, switch, True)
    on_fp16 = moe_triton.grouped_experts(*layer).float()
    assert on_fp16.isfinite().all()
    assert relative_error(on_fp16, on_bf16) <= 2**-8


@pytest.mark.parametrize("fp8_activations", [False, True])
def test_the_grouped_matmuls_replay_in_a_cuda_graph(fp8_activations):
    """Captured once, replayed with other tokens and another routing: the same result as eager (on fp8
    activations: fp8 experts quantizing the activations in the graph too)."""
    from nvllm.ops.moe_triton import grouped_experts  # needs triton: CUDA machines only

    x, gate_up, down, weights, ids = [
        t.to(torch.bfloat16) if t.is_floating_point() else t for t in layer_inputs(256, seed=1)
    ]
    if fp8_activations:
        (gate_up, gate_up_scale), (down, down_scale) = quantize_rows(gate_up), quantize_rows(down)
        quantized = (gate_up_scale, down_scale, True)
    else:
        quantized = ()
    grouped_experts(x, gate_up, down, weights, ids, *quantized)  # compile the kernels outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = grouped_experts(x, gate_up, down, weights, ids, *quantized)
    new_x, _, _, new_weights, new_ids = layer_inputs(256, seed=2)
    x.copy_(new_x), weights.copy_(new_weights), ids.copy_(new_ids)
    graph.replay()
    expected = grouped_experts(x, gate_up, down, weights, ids, *quantized)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


# a small MoE of the real head size (flash-attn builds may serve no other), 16 experts of which 4 a token
SMALL_MOE = dict(
    hidden_size=1024,
    intermediate_size=2048,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=128,
    num_experts=16,
    num_experts_per_tok=4,
    moe_intermediate_size=256,
)


def test_the_engine_on_a_small_moe_follows_transformers_up_to_bf16(tmp_path):
    path = write_family_checkpoint(tmp_path, "qwen3_moe", **SMALL_MOE)
    assert_follows_transformers_up_to_bf16(path, "qwen3_moe")


@pytest.mark.parametrize("move_bits", [False, True])
def test_the_engine_with_fp8_experts_computes_what_bf16_does_on_the_dequantized_weights(
    tmp_path, move_bits, monkeypatch
):
    """`model.quantization=fp8`, compiled with CUDA graphs, the fp8 weights converted by Triton or by moving
    bits (`model.fp8_move_bits`): a prefill of at most 16 tokens (the skinny kernel on the fp8
    projections, the grouped matmuls on the fp8 experts) against a bf16 engine holding the dequantized
    weights, and a larger one (the projections' activations quantized too) against the eager fp8 engine;
    each within what two bf16 computations of one model differ by."""
    from nvllm.layers.fused_moe import ExpertWeights
    from nvllm.ops import e4m3_to_bf16
    from nvllm.ops.fp8 import dequantized
    from tests.api.test_generate_gpu import EQUIVALENT_BF16_LOGITS
    from tests.helpers.engine_utils import random_prompt
    from tests.helpers.parallel_oracle import prefill_logits

    monkeypatch.setattr(e4m3_to_bf16, "ENABLED", e4m3_to_bf16.ENABLED)  # as it was, after the engines set it
    path = str(write_family_checkpoint(tmp_path, "qwen3_moe", **SMALL_MOE))
    small = [random_prompt(5, seed=1), random_prompt(7, seed=2)]  # 12 tokens: the skinny kernel's
    large = [random_prompt(5, seed=3), random_prompt(40, seed=4)]
    settings = dict(model__dtype="bfloat16", gpu_memory_utilization=0.2, max_model_len=256)

    def stacked(q, scale):
        return (q.float() * scale[..., None]).to(torch.bfloat16)

    fp8 = dict(model__quantization="fp8", model__fp8_move_bits=move_bits)
    with LLM(path, **fp8, **settings) as llm:
        assert e4m3_to_bf16.ENABLED == move_bits
        fp8_small, fp8_large = prefill_logits(llm, small), prefill_logits(llm, large)
        modules = dict(llm.model_runner.model.model.layers.named_modules())
        weights = {
            (name, "weight"): dequantized(module.weight, module.weight_scale, torch.bfloat16)
            for name, module in modules.items()
            if getattr(module, "weight_scale", None) is not None
        }
        for name, module in modules.items():
            if isinstance(module, ExpertWeights):
                weights[(name, "gate_up_proj")] = stacked(module.gate_up_proj, module.gate_up_scale)
                weights[(name, "down_proj")] = stacked(module.down_proj, module.down_scale)
    with LLM(path, **fp8, enforce_eager=True, **settings) as llm:
        eager_large = prefill_logits(llm, large)
    compiled_to_eager = relative_error(fp8_large, eager_large)
    assert compiled_to_eager < EQUIVALENT_BF16_LOGITS, f"45 tokens, compiled to eager: {compiled_to_eager}"
    with LLM(path, **settings) as llm:
        modules = dict(llm.model_runner.model.model.layers.named_modules())
        for (name, parameter), weight in weights.items():
            getattr(modules[name], parameter).data.copy_(weight)  # in place: the captured graphs read these
        bf16_small = prefill_logits(llm, small)
    fp8_to_bf16 = relative_error(fp8_small, bf16_small)
    assert fp8_to_bf16 < EQUIVALENT_BF16_LOGITS, f"12 tokens, fp8 against the dequantized bf16: {fp8_to_bf16}"
