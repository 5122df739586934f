"""Qwen3-MoE against transformers' implementation on a tiny random checkpoint transformers wrote (8 experts,
top-2, renormalised, one dense layer through `mlp_only_layers`): greedy tokens and top-k log-probabilities in
fp32 at TP=1 and TP=2; the router's choice on ties; the Triton grouped matmuls in Triton's interpreter
against the torch reference; the settings refused by name; the presets' sizes and the memory check."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import torch
import torch._dynamo.utils
import torch.nn.functional as F
import transformers

from nvllm import LLM, SamplingParams
from nvllm.config import EngineConfig, ParallelConfig
from nvllm.layers.fused_moe import FusedMoE
from nvllm.models.hf_config import model_from_checkpoint
from nvllm.models.presets import PRESETS
from nvllm.models.qwen3_moe import Qwen3MoeForCausalLM, is_sparse_layer
from nvllm.models.weights import hf_parameter_shapes, load_weights, parameter_bytes, random_tensors
from nvllm.ops import moe_ops
from nvllm.ops.fp8 import FP8, quantize_rows
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_routing import padding_to_no_expert, route
from nvllm.profiling.utilization import ModelWork
from nvllm.runner import memory
from tests.helpers.family_checkpoints import write_family_checkpoint
from tests.helpers.fp8_oracle import quantize_inputs_per_token
from tests.helpers.parallel_oracle import prefill_logits
from tests.helpers.transformers_parity import assert_greedy_equals_transformers
from tests.helpers.triton_interpreter import run_in_interpreter


@pytest.fixture(scope="module")
def moe_checkpoint(tmp_path_factory):
    return write_family_checkpoint(tmp_path_factory.mktemp("qwen3_moe"), "qwen3_moe")


@pytest.mark.parametrize("tp", [1, 2])
def test_greedy_tokens_and_logprobs_equal_transformers(moe_checkpoint, tp):
    assert_greedy_equals_transformers(moe_checkpoint, tensor_parallel_size=tp)


@pytest.mark.parametrize(
    "routing_kernel, quantization, fp8_activations",
    [(False, "none", False), (True, "none", False), (False, "fp8", False), (True, "fp8", True)],
)
def test_the_compiled_model_matches_eager_without_graph_breaks(
    moe_checkpoint, routing_kernel, quantization, fp8_activations
):
    """The router and `nvllm::fused_experts` (or, with `model.moe_routing_kernel`, `nvllm::routed_experts`)
    inside the compiled regions (fullgraph=True), on fp8 experts with their scales too, and on fp8
    activations: the sparse and the dense layer are a graph each (and each again for cascade decode), the
    final norm one; no graph breaks, no recompiles after warm-up, the default eager model's tokens."""
    prompts = [[9707, 11, 1879, 0], list(range(1000, 1023)), [5] * 40]
    staggered = [SamplingParams(max_tokens=n, temperature=0, ignore_eos=True) for n in (12, 7, 3)]
    settings = dict(
        kvcache_block_size=16,
        num_kvcache_blocks=64,
        max_num_batched_tokens=32,
        max_model_len=128,
        model__quantization=quantization,
        model__fp8_activations=fp8_activations,
    )
    with LLM(str(moe_checkpoint), enforce_eager=True, **settings) as eager:
        expected = [o.outputs[0].token_ids for o in eager.generate(prompts, staggered, use_tqdm=False)]
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    with LLM(
        str(moe_checkpoint),
        enforce_eager=False,
        compile__compile_prefill=True,
        model__moe_routing_kernel=routing_kernel,
        **settings,
    ) as compiled:
        layers = [m for m in compiled.model_runner.model.modules() if isinstance(m, FusedMoE)]
        assert layers and all(layer.routing_kernel == routing_kernel for layer in layers)
        assert counters["stats"]["unique_graphs"] == 5
        compiled.model_runner.trust_decode_guards = False  # a recompile would show instead of running
        outputs = compiled.generate(prompts, staggered, use_tqdm=False)
        assert counters["stats"]["unique_graphs"] == 5, "recompiled after warm-up"
    assert not counters["graph_break"], f"graph breaks: {dict(counters['graph_break'])}"
    assert [o.outputs[0].token_ids for o in outputs] == expected


def test_the_config_reads_the_experts_and_the_dense_layers(moe_checkpoint):
    config = model_from_checkpoint(str(moe_checkpoint))  # transformers 5 writes num_local_experts
    assert (config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size) == (8, 2, 64)
    assert config.norm_topk_prob and config.mlp_only_layers == [1]
    assert [is_sparse_layer(config, i) for i in range(3)] == [True, False, True]
    stepped = dataclasses.replace(config, mlp_only_layers=[], decoder_sparse_step=2)
    assert [is_sparse_layer(stepped, i) for i in range(4)] == [False, True, False, True]


def test_router_ties_go_to_the_lower_expert_index():
    """Equal router probabilities: the lower expert index is chosen first (torch.topk, which transformers
    uses, has no rule: on the CPU it returns experts 4 and 7 of the first row here)."""
    hidden, num_experts = 4, 8
    router_weight = torch.zeros(num_experts, hidden)
    router_weight[:, 0] = torch.tensor([0.0, 1.0, 2.0, 2.0, 2.0, 1.0, 0.0, 2.0])  # experts 2, 3, 4, 7 tie
    router_weight[:, 1] = 0.5  # a second row: all eight tie
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    weights, ids = route(F.linear(x, router_weight), top_k=2, renormalize=True)
    assert ids.tolist() == [[2, 3], [0, 1]]
    torch.testing.assert_close(weights, torch.full((2, 2), 0.5))
    weights, ids = route(F.linear(x, router_weight), top_k=3, renormalize=False)
    assert ids.tolist() == [[2, 3, 4], [0, 1, 2]]
    share = math.exp(2) / (2 * math.exp(0) + 2 * math.exp(1) + 4 * math.exp(2))  # softmax of a tied expert
    torch.testing.assert_close(weights, torch.tensor([[share] * 3, [1 / 8] * 3]))


def test_padding_tokens_go_to_no_expert_and_add_nothing():
    """A step's padding tokens (no KV slot) read no experts: they are routed to expert E (one past the
    last) at weight 0, their outputs are zeros, and the real tokens' outputs are those of the unpadded
    batch."""
    torch.manual_seed(0)
    layer = FusedMoE(hidden_size=16, num_experts=8, top_k=2, intermediate_size=8, renormalize=True)
    for param in layer.parameters():
        param.data.normal_(std=0.3)
    x = torch.randn(5, 16)
    padding = torch.tensor([False, False, False, True, True])
    weights, ids = route(layer.gate(x), top_k=2, renormalize=True)
    padded_weights, padded_ids = padding_to_no_expert(weights, ids, padding, 8)
    assert padded_ids.tolist() == ids[:3].tolist() + [[8, 8]] * 2
    assert padded_weights[3:].eq(0).all() and torch.equal(padded_weights[:3], weights[:3])
    x[3:] = float("inf")  # read by no expert: nothing of it shows
    padded = layer(x, padding=padding)
    torch.testing.assert_close(padded[:3], layer(x[:3]), atol=1e-6, rtol=1e-6)
    assert padded[3:].eq(0).all()


def test_the_triton_grouped_matmuls_in_the_interpreter_equal_the_torch_reference():
    """In bf16's place fp32, and on fp8 experts (a scale per row; rows of very different magnitudes, so
    that a scale applied to the wrong row or expert shows), after the plain routing and the fused one."""
    run_in_interpreter(
        """
import torch
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_route_triton import routed_experts
from nvllm.ops.moe_routing import route_step
from nvllm.ops.moe_triton import grouped_experts
generator = torch.Generator().manual_seed(0)
# (tokens, experts, top-k, hidden, intermediate): a decode-sized batch, one with experts of many rows (a
# larger tile), one token; sizes off the 64-wide tiles so the masks are exercised
shapes = [(5, 8, 2, 64, 48), (300, 4, 2, 96, 80), (1, 8, 3, 32, 16)]
for tokens, experts, top_k, hidden, intermediate in shapes:
    x = torch.randn(tokens, hidden, generator=generator)
    gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=generator) / hidden**0.5
    down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
    logits = torch.randn(tokens, experts, generator=generator)
    weights, ids = route_step(logits, None, top_k, True)
    expected = experts_reference(x, gate_up, down, weights, ids)
    ours = grouped_experts(x, gate_up, down, weights, ids)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    # padding rows (the last, and one in the middle) go to no expert: zeros, whatever their input
    if tokens > 1:
        padding = torch.arange(tokens) >= tokens - 2
        padding[tokens // 3] = True
        padded_x = torch.where(padding[:, None], float("nan"), x)
        padded = grouped_experts(padded_x, gate_up, down, *route_step(logits, padding, top_k, True))
        assert padded[padding].eq(0).all()
        torch.testing.assert_close(padded[~padding], expected[~padding], atol=1e-5, rtol=1e-5)
    # fp8 experts
    rows = 2 * intermediate
    gate_up *= torch.logspace(-1, 1, rows)[torch.randperm(rows, generator=generator)][:, None]
    down *= torch.logspace(-1, 1, experts * hidden).view(experts, hidden, 1)
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    scales = (gate_up_scale, down_scale)
    expected = experts_reference(x, gate_up_q, down_q, weights, ids, *scales)
    within = dict(atol=1e-5 * expected.abs().max().item(), rtol=1e-4)  # fp32 sums, in another order
    ours = grouped_experts(x, gate_up_q, down_q, weights, ids, *scales)
    torch.testing.assert_close(ours, expected, **within)
    ours = routed_experts(x, gate_up_q, down_q, logits, None, top_k, True, *scales)
    torch.testing.assert_close(ours, expected, **within)
    # the reference is the product with the dequantized experts, which differ from the unquantized ones
    dequantized = [q.float() * s[..., None] for q, s in ((gate_up_q, gate_up_scale), (down_q, down_scale))]
    torch.testing.assert_close(expected, experts_reference(x, *dequantized, weights, ids), **within)
    assert not torch.allclose(expected, experts_reference(x, gate_up, down, weights, ids))
"""
    )


@pytest.mark.parametrize(
    "min_pairs_in_chunks, chunk",
    [(10**9, 1024), (0, 1024), (0, 64)],
    ids=["one launch", "chunks", "small chunks"],
)
def test_tiles_are_padded_per_expert_and_know_their_expert(min_pairs_in_chunks, chunk):
    """Both ways of `align_by_expert` (one launch, or chunks of pairs: `ALIGN_IN_CHUNKS_MIN_PAIRS`), the
    chunks' also in chunks of 64 pairs, so that the 3,000 pairs below take more chunks than a program of
    `_place_runs_kernel` reads at once."""
    run_in_interpreter(
        f"""
import torch
from nvllm.ops import moe_align_triton
from nvllm.ops.moe_tiles import row_tile
from nvllm.ops.moe_align_triton import align_by_expert
moe_align_triton.ALIGN_IN_CHUNKS_MIN_PAIRS, moe_align_triton.CHUNK = {min_pairs_in_chunks}, {chunk}
"""
        + """
# pairs t * 2 + j: expert 0 has pairs 1 and 4, expert 1 pair 3, expert 3 pairs 0, 2 and 5
ids = torch.tensor([[3, 0], [3, 1], [0, 3]])
sorted_pairs, tile_expert = align_by_expert(ids, num_experts=4, block_m=2)
pad = 6
# capacity: 6 pairs + min(4 experts, 6 pairs) x 1 padding slot each at most
assert sorted_pairs.tolist() == [1, 4, 3, pad, 0, 2, 5, pad, pad, pad], sorted_pairs.tolist()
assert tile_expert.tolist() == [0, 1, 3, 3, 4], tile_expert.tolist()  # the last tile is past every run
# a padding token's pairs (expert 4: no expert) are in no run
ids = torch.tensor([[3, 0], [4, 4], [0, 3]])
sorted_pairs, tile_expert = align_by_expert(ids, num_experts=4, block_m=2)
assert sorted_pairs.tolist() == [1, 4, 0, 5, pad, pad, pad, pad, pad, pad], sorted_pairs.tolist()
assert tile_expert.tolist() == [0, 3, 4, 4, 4], tile_expert.tolist()
# more pairs than one chunk, each expert's run in pair order; expert 6 is none (padding tokens' pairs)
ids = torch.randint(0, 7, (1500, 2), generator=torch.Generator().manual_seed(0))
sorted_pairs, tile_expert = align_by_expert(ids, num_experts=6, block_m=16)
flat, start = ids.flatten(), 0
for expert in range(6):
    pairs = (flat == expert).nonzero().flatten()
    run = -(-len(pairs) // 16) * 16
    assert sorted_pairs[start : start + len(pairs)].tolist() == pairs.tolist()
    assert (sorted_pairs[start + len(pairs) : start + run] == 3000).all()
    assert (tile_expert[start // 16 : (start + run) // 16] == expert).all()
    start += run
assert (sorted_pairs[start:] == 3000).all() and (tile_expert[start // 16 :] == 6).all()
assert row_tile(8, 128) == 16 and row_tile(4096, 128) == 32 and row_tile(65536, 128) == 64
"""
    )


def config_json(tmp_path, checkpoint, **changes) -> str:
    """A checkpoint directory holding only `checkpoint`'s config.json with `changes`: only it is read."""
    directory = tmp_path / "moe"
    directory.mkdir()
    config = json.loads((checkpoint / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


REFUSED = [
    ({"shared_expert_intermediate_size": 256}, "shared_expert_intermediate_size=256"),
    ({"scoring_func": "sigmoid"}, "scoring_func='sigmoid'"),
    ({"routed_scaling_factor": 2.5}, "routed_scaling_factor=2.5"),
    ({"n_group": 4, "topk_group": 2}, "n_group=4"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok=9 of num_experts=8"),
    ({"decoder_sparse_step": 0}, "decoder_sparse_step=0"),
    (
        {"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 0, "layer_types": None},
        "use_sliding_window=true",
    ),
]


@pytest.mark.parametrize("changes, message", REFUSED)
def test_a_routing_the_engine_does_not_implement_is_refused_by_name(
    moe_checkpoint, tmp_path, changes, message
):
    with pytest.raises(ValueError, match=re.escape(message)):
        model_from_checkpoint(config_json(tmp_path, moe_checkpoint, **changes))


FP8_PROMPTS = [[9707, 11, 1879, 0], list(range(1000, 1023)), [5] * 17]
FP8_SETTINGS = dict(
    model__quantization="fp8", kvcache_block_size=16, num_kvcache_blocks=32, max_model_len=128
)


def dequantize_like_the_engine(hf: torch.nn.Module) -> None:
    """Every matrix of the decoder layers but the routers replaced by what its fp8 form stands for: a
    scale per row of each expert (`[E, out, in]`, as the engine's) and of each projection."""
    for name, param in hf.model.layers.named_parameters():
        if param.dim() >= 2 and not name.endswith("mlp.gate.weight"):
            q, scale = quantize_rows(param.data)
            param.data = q.float() * scale[..., None]


def test_fp8_experts_compute_what_transformers_does_holding_the_dequantized_weights(moe_checkpoint):
    hf = transformers.Qwen3MoeForCausalLM.from_pretrained(str(moe_checkpoint), dtype=torch.float32).eval()
    with torch.no_grad():
        unquantized = [hf(torch.tensor([p])).logits[0, -1] for p in FP8_PROMPTS]
        dequantize_like_the_engine(hf)
        expected = [hf(torch.tensor([p])).logits[0, -1] for p in FP8_PROMPTS]
    with LLM(str(moe_checkpoint), enforce_eager=True, **FP8_SETTINGS) as llm:
        model = llm.model_runner.model
        moe = next(m for m in model.modules() if isinstance(m, FusedMoE))
        assert moe.experts.gate_up_proj.dtype == moe.experts.down_proj.dtype == FP8
        assert moe.gate.weight.dtype == torch.float32  # the router is not quantized
        # the norm before a sparse layer's experts has no quantization to fuse (the experts' op quantizes
        # inside), the norm before the dense layer's gate/up has
        fused = [layer.post_attention_layernorm.fuse_in_graph for layer in model.model.layers]
        assert fused == [not is_sparse_layer(llm.config.model, i) for i in range(len(fused))] and any(fused)
        # what the memory check and the profiler count is what the model holds (weights and scales)
        held = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
        rotary = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if "rotary" in n)
        counted = sum(parameter_bytes(llm.config.model, torch.float32).values())
        assert held - rotary == counted
        ours = prefill_logits(llm, FP8_PROMPTS)
    for row, reference, exact in zip(ours, expected, unquantized):
        torch.testing.assert_close(row, reference, atol=2e-4, rtol=1e-4)
        assert (row - exact).abs().max() > 1e-2  # the experts were quantized


def reference_experts_on_fp8_activations(hf: torch.nn.Module, ranks: int = 1) -> None:
    """Each sparse layer's experts of `hf` computed by the torch reference on fp8 activations
    (`experts_reference(..., quantize_activations=True)`), from its experts quantized as the engine's; with
    `ranks` > 1 as a tensor-parallel engine computes them: each rank's slice of every expert's intermediate
    on its own (its scales of the weights' whole rows, its own of the intermediate's), the slices' outputs
    summed."""
    experts = [m for m in hf.modules() if hasattr(m, "gate_up_proj") and hasattr(m, "down_proj")]
    if not experts:
        pytest.skip("this transformers does not stack a layer's experts in one module")
    for module in experts:
        (gate_up, gate_up_scale), (down, down_scale) = (
            quantize_rows(module.gate_up_proj),
            quantize_rows(module.down_proj),
        )
        intermediate = down.shape[2]
        width = intermediate // ranks
        shards = []
        for rank in range(ranks):
            mine = torch.arange(rank * width, (rank + 1) * width)
            rows = torch.cat([mine, intermediate + mine])  # the gate's rows of the slice, then the up's
            shards.append((gate_up[:, rows], down[:, :, mine], gate_up_scale[:, rows], down_scale))

        def forward(x, top_k_index, top_k_weights, shards=shards):
            return sum(
                experts_reference(
                    x,
                    gate_up,
                    down,
                    top_k_weights,
                    top_k_index,
                    gate_up_scale,
                    down_scale,
                    quantize_activations=True,
                )
                for gate_up, down, gate_up_scale, down_scale in shards
            )

        module.forward = forward


def test_fp8_activations_compute_what_transformers_does_with_the_reference_experts(
    moe_checkpoint, monkeypatch
):
    """`model.fp8_activations`: the engine's sparse layers on fp8 activations (the reference experts; every
    batch size quantizing here, where the engine's rule has only prefill-sized batches of at least
    `FP8_ACTIVATIONS_MIN_TOKENS` do, `tests/ops/test_moe_fp8_activations.py`), its attention projections and
    dense layer on inputs quantized a scale per token, the router as before."""
    monkeypatch.setattr(moe_ops, "FP8_ACTIVATIONS_MIN_TOKENS", 1)
    hf = transformers.Qwen3MoeForCausalLM.from_pretrained(str(moe_checkpoint), dtype=torch.float32).eval()
    with torch.no_grad():
        reference_experts_on_fp8_activations(hf)
        dequantize_like_the_engine(hf)
        quantize_inputs_per_token(hf.model.layers, skip=("mlp.gate",))
        expected = [hf(torch.tensor([p])).logits[0, -1] for p in FP8_PROMPTS]
    with LLM(str(moe_checkpoint), enforce_eager=True, **FP8_SETTINGS) as llm:
        weights_only = prefill_logits(llm, FP8_PROMPTS)
    with LLM(str(moe_checkpoint), enforce_eager=True, model__fp8_activations=True, **FP8_SETTINGS) as llm:
        ours = prefill_logits(llm, FP8_PROMPTS)
    for row, reference, other in zip(ours, expected, weights_only):
        torch.testing.assert_close(row, reference, atol=2e-4, rtol=1e-4)
        assert (row - other).abs().max() > 1e-3  # the activations were quantized


# a tensor-parallel rank holds a slice of these projections' input features
ROW_PARALLEL = ("self_attn.o_proj", "mlp.down_proj")


def test_fp8_activations_at_tp2_compute_what_transformers_does_with_each_ranks_slices(moe_checkpoint):
    """`model.fp8_activations` at TP=2: each rank quantizes what it holds, a scale per token over its slice:
    the inputs of the row-parallel projections (o, the dense layer's down) and the experts' intermediate
    (`nvllm.layers.fused_moe`), so TP=2 is not TP=1's quantization; the oracle quantizes as the ranks do.
    One step of 1,027 tokens, as the engine's experts quantize batches of `FP8_ACTIVATIONS_MIN_TOKENS` and
    more (the workers' setting, which this process cannot change); most of them two prompts of one token
    repeated, whose positions all hold the same hidden state: among a thousand distinct rows some element
    would sit at an fp8 rounding's edge, where the fp32 sums' order alone rounds it the other way."""
    prompts = [[7] * 500, [5] * 500, list(range(1000, 1023)), [9287, 11, 1879, 0]]
    assert sum(map(len, prompts)) >= moe_ops.FP8_ACTIVATIONS_MIN_TOKENS
    hf = transformers.Qwen3MoeForCausalLM.from_pretrained(str(moe_checkpoint), dtype=torch.float32).eval()
    with torch.no_grad():
        reference_experts_on_fp8_activations(hf, ranks=2)
        dequantize_like_the_engine(hf)
        quantize_inputs_per_token(hf.model.layers, skip=("mlp.gate",), ranks=2, row_parallel=ROW_PARALLEL)
        expected = [hf(torch.tensor([p])).logits[0, -1] for p in prompts]
    settings = dict(FP8_SETTINGS, num_kvcache_blocks=80, max_model_len=512)
    with LLM(
        str(moe_checkpoint),
        enforce_eager=True,
        tensor_parallel_size=2,
        model__fp8_activations=True,
        **settings,
    ) as llm:
        ours = prefill_logits(llm, prompts)
    for row, reference in zip(ours, expected):
        torch.testing.assert_close(row, reference, atol=2e-4, rtol=1e-4)


def test_fp8_activations_need_fp8_weights(moe_checkpoint):
    with pytest.raises(ValueError, match=re.escape("it needs model.quantization=fp8")):
        LLM(str(moe_checkpoint), enforce_eager=True, model__fp8_activations=True)


def test_tp2_computes_what_tp1_does_with_fp8_experts(moe_checkpoint):
    with LLM(str(moe_checkpoint), enforce_eager=True, **FP8_SETTINGS) as llm:
        expected = prefill_logits(llm, FP8_PROMPTS)
    with LLM(str(moe_checkpoint), enforce_eager=True, tensor_parallel_size=2, **FP8_SETTINGS) as llm:
        torch.testing.assert_close(prefill_logits(llm, FP8_PROMPTS), expected, rtol=1e-4, atol=1e-4)


def test_a_missing_expert_tensor_is_named(moe_checkpoint):
    config = model_from_checkpoint(str(moe_checkpoint))
    model = Qwen3MoeForCausalLM(config)
    missing = "model.layers.2.mlp.experts.5.up_proj.weight"
    tensors = [t for t in random_tensors(config, seed=0) if t[0] != missing]
    with pytest.raises(ValueError, match=r"experts\.gate_up_proj', 5, 1\)"):
        load_weights(model, tensors, hf_parameter_shapes(config))


# the model cards' figures: 30.5B parameters, 3.3B active; 235B, 22B active
PRESET_PARAMETERS = {"qwen3-30b-a3b": (30_532_122_624, 3.3e9), "qwen3-235b-a22b": (235_093_634_560, 22e9)}


@pytest.mark.parametrize("preset", PRESET_PARAMETERS)
def test_presets_have_the_published_sizes(preset):
    config = PRESETS[preset]
    shapes = hf_parameter_shapes(config)
    total = sum(math.prod(shape) for shape in shapes.values())
    experts = sum(math.prod(shape) for name, shape in shapes.items() if ".experts." in name)
    active = total - experts + experts * config.num_experts_per_tok / config.num_experts
    assert total == PRESET_PARAMETERS[preset][0]
    assert abs(active / PRESET_PARAMETERS[preset][1] - 1) < 0.02


def test_the_235b_preset_is_refused_on_one_gpu_with_the_numbers_and_fits_four_or_two_in_fp8(monkeypatch):
    h200_free = 139 * 2**30
    monkeypatch.setattr(memory, "available_bytes", lambda device: h200_free)
    model = dataclasses.replace(PRESETS["qwen3-235b-a22b"], dtype="bfloat16")
    one_gpu = EngineConfig(model=model)
    message = "qwen3-235b-a22b needs 437.9 GiB of weights (bfloat16) and 0.0 GiB of KV cache per rank"
    with pytest.raises(ValueError, match=re.escape(message)):
        memory.check_fits(one_gpu, torch.bfloat16, "cuda")
    memory.check_fits(dataclasses.replace(one_gpu, parallel=ParallelConfig(4)), torch.bfloat16, "cuda")
    # fp8 experts and projections: a byte an element (and a scale a row), two GPUs, not one
    fp8 = dataclasses.replace(one_gpu, model=dataclasses.replace(model, quantization="fp8"))
    message = "qwen3-235b-a22b needs 220.5 GiB of weights (bfloat16, fp8 matmuls)"
    with pytest.raises(ValueError, match=re.escape(message)):
        memory.check_fits(fp8, torch.bfloat16, "cuda")
    memory.check_fits(dataclasses.replace(fp8, parallel=ParallelConfig(2)), torch.bfloat16, "cuda")


def test_a_step_reads_the_experts_its_tokens_touch():
    """Qwen3-30B-A3B in bf16: one token reads 8 of each layer's 128 experts; 256 tokens nearly all of them
    (1 - (120/128)^256); FLOPs count each token's 8 experts and the router."""
    config = PRESETS["qwen3-30b-a3b"]
    work = ModelWork.of(config, torch.bfloat16)
    expert_bytes = 48 * 128 * 3 * 2048 * 768 * 2
    assert work.expert_bytes == expert_bytes
    kv = work.kv_bytes_per_token
    assert work.bytes(1, 1, 0) == work.weight_bytes_per_step + expert_bytes * 8 / 128 + kv
    assert work.bytes(4, 4, 0) == 4 * (work.weight_bytes_per_step + expert_bytes * 8 / 128) + 4 * kv
    read_256 = work.bytes(1, 256, 0) - work.weight_bytes_per_step - 256 * kv
    assert (
        read_256 == pytest.approx(expert_bytes * (1 - (120 / 128) ** 256))
        and read_256 > 0.9999 * expert_bytes
    )
    attention = 2048 * (32 * 128 + 2 * 4 * 128) + 32 * 128 * 2048
    experts = 2048 * 128 + 8 * 3 * 2048 * 768
    assert work.linear_flops_per_token == 2 * 48 * (attention + experts)


def test_fp8_experts_count_a_byte_an_element_and_a_scale_a_row():
    """Qwen3-30B-A3B with `quantization=fp8`: the experts (and the attention projections) a byte an element
    and 4 bytes of scale a row, the routers in the model's dtype."""
    config = dataclasses.replace(PRESETS["qwen3-30b-a3b"], quantization="fp8")
    work = ModelWork.of(config, torch.bfloat16)
    assert work.expert_bytes == 48 * 128 * (3 * 2048 * 768 + 4 * (768 + 768 + 2048))
    bf16 = ModelWork.of(PRESETS["qwen3-30b-a3b"], torch.bfloat16)
    attention = 48 * (2048 * (32 + 2 * 4) * 128 + 32 * 128 * 2048)
    attention_scales = 48 * 4 * ((32 + 2 * 4) * 128 + 2048)
    # the attention projections' bytes halve (less their scales); the routers' and the rest stay
    assert work.weight_bytes_per_step == bf16.weight_bytes_per_step - (attention - attention_scales)
