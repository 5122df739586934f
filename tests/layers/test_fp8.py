"""FP8 weights (`model.quantization=fp8`): the quantization against its definition, the engine against
transformers' Qwen3 holding the dequantized weights, TP=2 against TP=1, compiled graphs taking the ops, and
on the GPU the small-batch kernel and `torch._scaled_mm` against the fp32 computation."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3ForCausalLM

from nvllm import LLM
from nvllm.ops.fp8 import FP8, FP8_MAX, dequantized, quantize_rows
from nvllm.ops.fp8_linear_ops import apply_fp8_linear, apply_fp8_linear_silu_mul
from tests.helpers.engine_utils import TINY_VOCAB_SIZE, random_prompt, tiny_llm
from tests.helpers.fp8_oracle import quantize_inputs_per_token
from tests.helpers.parallel_oracle import prefill_logits, relative_error

PROMPTS = [[9707, 11, 1879, 0], list(range(1000, 1023)), [151644, 872, 198, 3838, 374, 220, 17, 10]]


def test_quantize_rows_scales_each_row_to_the_formats_range_and_rounds_once():
    torch.manual_seed(0)
    weight = torch.randn(6, 64) * torch.logspace(-3, 2, 6)[:, None]
    weight[4] = 0
    q, scale = quantize_rows(weight)
    assert q.dtype == FP8 and scale.dtype == torch.float32 and scale.shape == (6,)
    assert torch.equal(q.float().abs().amax(1)[[0, 1, 2, 3, 5]], torch.full((5,), FP8_MAX))
    assert scale[4] == 1 and not q[4].float().any()  # a zero row stays zeros
    assert torch.equal(q, (weight / scale[:, None]).to(FP8))  # one rounding, to the nearest e4m3
    # e4m3 keeps 3 mantissa bits: half an ulp is 2^-4 of a normal value, 2^-10 of the scale below them
    error = (dequantized(q, scale, torch.float32) - weight).abs()
    assert (error <= 2**-4 * weight.abs() + 2**-10 * scale[:, None]).all()
    # a stack of matrices (MoE experts `[E, rows, cols]`): each row of each matrix, as alone
    stacked_q, stacked_scale = quantize_rows(torch.stack([weight, 4 * weight.flip(0)]))
    assert stacked_scale.shape == (2, 6) and torch.equal(stacked_scale[0], scale)
    assert torch.equal(stacked_q[0], q) and torch.equal(stacked_q[1], q.flip(0))


def test_engine_matches_transformers_holding_the_dequantized_weights(tiny_checkpoint):
    hf = Qwen3ForCausalLM.from_pretrained(str(tiny_checkpoint), dtype=torch.float32).eval()
    exact = [hf(torch.tensor([p])).logits[0, -1] for p in PROMPTS]
    for module in hf.model.layers.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = dequantized(*quantize_rows(module.weight.data), torch.float32)
    settings = dict(enforce_eager=True, kvcache_block_size=4, num_kvcache_blocks=64, max_model_len=64)
    with LLM(str(tiny_checkpoint), model__quantization="fp8", **settings) as llm:
        layer = llm.model_runner.model.model.layers[0]
        assert layer.self_attn.qkv_proj.weight.dtype == FP8 and layer.mlp.down_proj.weight.dtype == FP8
        assert llm.model_runner.model.lm_head.weight.dtype == torch.float32  # the LM head is not quantized
        ours = prefill_logits(llm, PROMPTS)
    with torch.no_grad():
        for row, prompt, unquantized in zip(ours, PROMPTS, exact):
            reference = hf(torch.tensor([prompt])).logits[0, -1]
            torch.testing.assert_close(row, reference, atol=2e-4, rtol=1e-4)
            assert (row - unquantized).abs().max() > 1e-2  # the weights were quantized


def test_fp8_activations_match_transformers_quantizing_each_matmuls_input(tiny_checkpoint):
    """`model.fp8_activations`: every matmul of the decoder's fp8 weights on its input quantized a scale per
    token, whatever the batch's size (eager on the CPU: the torch reference's)."""
    hf = Qwen3ForCausalLM.from_pretrained(str(tiny_checkpoint), dtype=torch.float32).eval()
    for module in hf.model.layers.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = dequantized(*quantize_rows(module.weight.data), torch.float32)
    with torch.no_grad():
        weights_only = [hf(torch.tensor([p])).logits[0, -1] for p in PROMPTS]
        quantize_inputs_per_token(hf.model.layers)
        expected = [hf(torch.tensor([p])).logits[0, -1] for p in PROMPTS]
    settings = dict(enforce_eager=True, kvcache_block_size=4, num_kvcache_blocks=64, max_model_len=64)
    with LLM(str(tiny_checkpoint), model__quantization="fp8", model__fp8_activations=True, **settings) as llm:
        ours = prefill_logits(llm, PROMPTS)
    for row, reference, other in zip(ours, expected, weights_only):
        torch.testing.assert_close(row, reference, atol=2e-4, rtol=1e-4)
        assert (row - other).abs().max() > 1e-3  # the activations were quantized


def test_fp8_activations_need_fp8_weights():
    with pytest.raises(ValueError, match="model.fp8_activations=true quantizes the activations of fp8"):
        tiny_llm(model__fp8_activations=True)


def test_tp2_computes_what_tp1_does_with_fp8_weights():
    prompts = [random_prompt(length, seed=70 + length) for length in (5, 20)]
    settings = dict(
        model__quantization="fp8", kvcache_block_size=16, num_kvcache_blocks=12, max_model_len=128
    )
    with tiny_llm(**settings) as llm:
        expected = prefill_logits(llm, prompts)
    with tiny_llm(tensor_parallel_size=2, **settings) as llm:
        torch.testing.assert_close(prefill_logits(llm, prompts), expected, rtol=1e-4, atol=1e-4)


def test_compiled_graphs_take_the_fp8_op_with_the_scales():
    torch.manual_seed(0)
    q, scale = quantize_rows(torch.randn(32, 16))
    gate_up_q, gate_up_scale = quantize_rows(torch.randn(64, 16))
    x = torch.randn(5, 16)
    ops_in_graph = []

    def record_ops(graph_module, example_inputs):
        ops_in_graph.extend(node.target for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module.forward

    def layer(x):
        return apply_fp8_linear(x, q, scale), apply_fp8_linear_silu_mul(x, gate_up_q, gate_up_scale)

    compiled = torch.compile(layer, backend=record_ops, fullgraph=True)(x)
    assert ops_in_graph.count(torch.ops.nvllm.scaled_mm.default) == 2
    assert not {torch.ops.nvllm.linear.default, torch.ops.nvllm.linear_silu_mul.default} & set(ops_in_graph)
    eager = layer(x)
    assert all(torch.equal(a, b) for a, b in zip(compiled, eager))
    torch.testing.assert_close(eager[0], x @ dequantized(q, scale, torch.float32).T, atol=1e-5, rtol=1e-5)
    gate, up = (x @ dequantized(gate_up_q, gate_up_scale, torch.float32).T).chunk(2, -1)
    torch.testing.assert_close(eager[1], torch.nn.functional.silu(gate) * up, atol=1e-5, rtol=1e-5)


def traced_graphs(monkeypatch, quantize_activations: bool) -> list[list]:
    """The ops of each graph an fp8 matmul and gate/up matmul trace into over batches of 5, 20 and 7 rows
    (dynamic shapes), on the CPU with the CUDA rule for the skinny kernel patched in; each batch's compiled
    result equal to eager's."""
    from nvllm.ops import fp8_linear_ops

    monkeypatch.setattr(fp8_linear_ops, "uses_skinny_matmul", lambda x: x.shape[0] <= 16)
    torch.manual_seed(0)
    q, scale = quantize_rows(torch.randn(32, 16))
    gate_up_q, gate_up_scale = quantize_rows(torch.randn(64, 16))
    graphs = []

    def record_ops(graph_module, example_inputs):
        graphs.append([node.target for node in graph_module.graph.nodes if node.op.startswith("call_")])
        return graph_module.forward

    def layer(x):
        return (
            apply_fp8_linear(x, q, scale, None, quantize_activations),
            apply_fp8_linear_silu_mul(x, gate_up_q, gate_up_scale, quantize_activations),
        )

    compiled = torch.compile(layer, backend=record_ops, fullgraph=True, dynamic=True)
    for rows in (5, 20, 7):
        x = torch.randn(rows, 16)
        ours, eager = compiled(x), layer(x)
        assert all(torch.equal(a, b) for a, b in zip(ours, eager))
        if quantize_activations:  # eager runs the quantized path's reference
            from nvllm.ops.fp8 import quantize_tokens, scaled_mm_reference

            torch.testing.assert_close(ours[0], scaled_mm_reference(*quantize_tokens(x), q, scale, x.dtype))
    return graphs


def test_small_batches_trace_a_graph_of_the_skinny_kernels_ops_without_quantization(monkeypatch):
    """A batch the skinny kernel takes (on CUDA: at most 16 rows) needs no quantized activations: traced, it
    takes `nvllm::linear` and `nvllm::linear_silu_mul` on the fp8 weights, in a graph of its own, and larger
    batches keep `nvllm::scaled_mm`."""
    small, large = traced_graphs(monkeypatch, quantize_activations=False)  # 7 rows reuses 5's graph
    assert (
        small.count(torch.ops.nvllm.linear.default)
        == small.count(torch.ops.nvllm.linear_silu_mul.default)
        == 1
    )
    assert torch.ops.nvllm.scaled_mm.default not in small
    assert "amax" not in small and "amax" in large  # the activations' quantization (`quantize_rows`)
    assert large.count(torch.ops.nvllm.scaled_mm.default) == 2


def test_with_fp8_activations_every_batch_traces_one_graph_of_the_quantized_op(monkeypatch):
    """`quantize_activations` (`model.fp8_activations`): small batches quantize theirs too, so no batch takes
    the skinny kernel's ops and one graph serves every size."""
    (graph,) = traced_graphs(monkeypatch, quantize_activations=True)  # no guard on the row count
    assert graph.count(torch.ops.nvllm.scaled_mm.default) == 2 and "amax" in graph
    assert not {torch.ops.nvllm.linear.default, torch.ops.nvllm.linear_silu_mul.default} & set(graph)


def test_scaled_mm_path_quantizes_the_activations_per_token_and_scales_back():
    """What CUDA batches of more than 16 rows run (and CPU ones with `model.fp8_activations`, through the
    reference): within e4m3's rounding of the activations (3 mantissa bits) of the fp32 product, rows of
    very different magnitudes alike."""
    from nvllm.ops.fp8 import scaled_mm_linear

    torch.manual_seed(0)
    q, scale = quantize_rows(torch.randn(64, 128) * torch.logspace(-2, 2, 64)[:, None])
    x = (torch.randn(20, 128) * torch.logspace(-3, 3, 20)[:, None]).bfloat16()
    ours = scaled_mm_linear(x, q, scale).float()
    exact = x.float() @ dequantized(q, scale, torch.float32).T
    relative = (ours - exact).norm(dim=-1) / exact.norm(dim=-1)
    assert 0 < relative.max() < 2**-4, relative


def test_vllms_quantization_argument_names_the_same_setting():
    from nvllm.engine.config_resolution import engine_config

    assert engine_config("tiny", quantization="fp8").model.quantization == "fp8"
    assert engine_config("tiny", quantization=None).model.quantization == "none"  # vLLM's default


def test_unknown_quantization_is_an_error_that_names_it():
    with pytest.raises(ValueError, match="model.quantization='int4' must be one of none, fp8"):
        tiny_llm(model__quantization="int4")


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 7, 16, 17, 100, 256, 300])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_fp8_matmuls_on_the_gpu_against_fp32(rows, gated, compiled):
    """Up to 16 rows: the skinny kernel, whose only rounding is the weight's and the output's. More:
    `torch._scaled_mm` (or nvllm's fp8 Triton GEMM up to 256 rows, where enabled), which rounds the
    activations to e4m3 too (3 mantissa bits), an error of about 2^-4 / sqrt(3) of each product, averaged
    over the dot product. `nvllm::scaled_mm` called directly, and compiled, where inductor's fused
    quantization feeds it."""
    from nvllm.ops.fp8 import quantize_tokens
    from nvllm.ops.fp8_linear_ops import scaled_mm
    from nvllm.ops.linear_ops import silu_mul

    torch.manual_seed(0)
    q, scale = quantize_rows(torch.randn(2 * 1536 if gated else 1024, 2048, device="cuda"))
    x = torch.randn(rows, 2048, device="cuda", dtype=torch.bfloat16)
    product = x.float() @ dequantized(q, scale, torch.float32).T
    if gated:
        gate, up = product.chunk(2, -1)
        gate, up = gate.bfloat16().float(), up.bfloat16().float()  # as an unfused matmul rounds its output
        exact = torch.nn.functional.silu(gate) * up
        if compiled:
            ours = torch.compile(apply_fp8_linear_silu_mul, fullgraph=True, dynamic=True)(x, q, scale).float()
        else:
            ours = silu_mul(scaled_mm(x, *quantize_tokens(x), q, scale)).float()  # as compiled graphs run it
    else:
        exact = product
        if compiled:
            ours = torch.compile(apply_fp8_linear, fullgraph=True, dynamic=True)(x, q, scale).float()
        else:
            ours = scaled_mm(x, *quantize_tokens(x), q, scale).float()
    relative = ((ours - exact).norm(dim=-1) / exact.norm(dim=-1)).max().item()
    assert relative < (2**-7 if rows <= 16 else 2**-4), relative


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 7, 16, 17, 100])
@pytest.mark.parametrize("gated", [False, True])
def test_fp8_activations_on_the_gpu_equal_the_quantized_reference(rows, gated):
    """`quantize_activations` (`model.fp8_activations`), compiled: every batch, small ones too, multiplies
    activations quantized a scale per token on the fp8 tensor cores; against the reference of the same
    quantization, they differ by the order of fp32 sums and the output's bf16 rounding."""
    from nvllm.ops.fp8 import quantize_tokens, scaled_mm_reference

    torch.manual_seed(0)
    q, scale = quantize_rows(torch.randn(2 * 1536 if gated else 1024, 2048, device="cuda"))
    x = torch.randn(rows, 2048, device="cuda", dtype=torch.bfloat16)
    product = scaled_mm_reference(*quantize_tokens(x), q, scale, torch.float32)
    if gated:
        gate, up = product.chunk(2, -1)
        gate, up = gate.bfloat16().float(), up.bfloat16().float()  # as the matmul rounds its output
        exact = torch.nn.functional.silu(gate) * up
        function = apply_fp8_linear_silu_mul
    else:
        exact, function = product, apply_fp8_linear
    ours = torch.compile(function, fullgraph=True, dynamic=True)(x, q, scale, quantize_activations=True)
    relative = ((ours.float() - exact).norm(dim=-1) / exact.norm(dim=-1)).max().item()
    assert relative < 2**-7, relative


@pytest.mark.gpu
def test_fp8_engine_on_the_gpu_computes_what_bf16_does_on_the_dequantized_weights():
    """Compiled against eager (the same kernels by batch size, so bf16 rounding apart), and a prefill of at
    most 16 tokens (the skinny kernel on the fp8 weights) against a bf16 engine holding the dequantized
    weights: both within what two bf16 computations of one model differ by
    (tests/api/test_generate_gpu.py)."""
    from tests.api.test_generate_gpu import EQUIVALENT_BF16_LOGITS

    small = [random_prompt(5, seed=1), random_prompt(7, seed=2)]  # 12 tokens: one skinny prefill
    large = [random_prompt(5, seed=3), random_prompt(40, seed=4)]  # 45: torch._scaled_mm
    settings = dict(
        model__vocab_size=TINY_VOCAB_SIZE,
        model__head_dim=128,  # the real models' (flash-attn builds may serve no other)
        model__dtype="bfloat16",
        gpu_memory_utilization=0.2,
    )
    with LLM("tiny", model__quantization="fp8", **settings) as llm:  # compiled, CUDA graphs
        fp8_small, fp8_large = prefill_logits(llm, small), prefill_logits(llm, large)
        layers = llm.model_runner.model.model.layers
        matmuls = {
            name: dequantized(module.weight, module.weight_scale, torch.bfloat16)
            for name, module in layers.named_modules()
            if getattr(module, "weight_scale", None) is not None
        }
    with LLM("tiny", model__quantization="fp8", enforce_eager=True, **settings) as llm:
        eager_large = prefill_logits(llm, large)
    compiled_to_eager = relative_error(fp8_large, eager_large)
    assert compiled_to_eager < EQUIVALENT_BF16_LOGITS, f"45 tokens, compiled to eager: {compiled_to_eager}"
    with LLM("tiny", **settings) as llm:
        modules = dict(llm.model_runner.model.model.layers.named_modules())
        for name, weight in matmuls.items():
            modules[name].weight.data.copy_(weight)  # in place: the captured graphs read these
        bf16_small = prefill_logits(llm, small)
    fp8_to_bf16 = relative_error(fp8_small, bf16_small)
    assert fp8_to_bf16 < EQUIVALENT_BF16_LOGITS, f"12 tokens, fp8 against the dequantized bf16: {fp8_to_bf16}"


@pytest.mark.gpu
def test_fp8_activations_on_the_gpu_compiled_equal_eager():
    """`model.fp8_activations` in the compiled model with its CUDA graphs (small batches through the
    small-batch fp8 GEMM, the quantization fused by inductor) against eager (the same products, quantized
    in eager kernels), a prefill of at most 16 tokens and a larger one, within what two bf16 computations
    of one model differ by."""
    from tests.api.test_generate_gpu import EQUIVALENT_BF16_LOGITS

    small = [random_prompt(5, seed=1), random_prompt(7, seed=2)]
    large = [random_prompt(5, seed=3), random_prompt(40, seed=4)]
    settings = dict(
        model__vocab_size=TINY_VOCAB_SIZE,
        model__head_dim=128,
        model__dtype="bfloat16",
        model__quantization="fp8",
        model__fp8_activations=True,
        gpu_memory_utilization=0.2,
    )
    with LLM("tiny", **settings) as llm:
        compiled = prefill_logits(llm, small), prefill_logits(llm, large)
    with LLM("tiny", enforce_eager=True, **settings) as llm:
        eager = prefill_logits(llm, small), prefill_logits(llm, large)
    for ours, theirs in zip(compiled, eager):
        assert relative_error(ours, theirs) < EQUIVALENT_BF16_LOGITS


def test_accuracy_report_counts_shared_tokens_and_the_gap_where_generations_part():
    from experiments.studies.fp8_accuracy import agreement, report
    from nvllm.outputs import CompletionOutput

    reference = CompletionOutput(
        0, "", [5, 6, 7], logprobs=[{5: -0.5, 9: -2.0}, {6: -1.0, 8: -1.25}, {7: -1.0}]
    )
    parts = CompletionOutput(0, "", [5, 8, 7], logprobs=[{5: -0.75}, {8: -1.0}, {7: -1.0}])
    result = agreement(reference, parts)
    assert (result.shared, result.parted, result.gap_at_parting) == (1, True, 0.25)
    assert result.mean_logprob_difference == 0.25
    same = agreement(reference, reference)
    assert (same.shared, same.parted, same.gap_at_parting, same.mean_logprob_difference) == (
        3,
        False,
        None,
        0,
    )
    at_once = CompletionOutput(0, "", [9, 6, 7], logprobs=[{9: -0.6}, {6: -1.0}, {7: -1.0}])
    first = agreement(reference, at_once)
    assert (first.shared, first.gap_at_parting, first.mean_logprob_difference) == (0, 1.5, None)
    pairs = [result, same, first]
    table = report("m", {("float32", "fp8"): pairs}, {"float32": 2.0, "fp8": 0.5}, "bfloat16", 3)
    # one row: one of the three never parts; shared 1, 3 and 0 tokens; log-prob differences 0.25 and 0 over
    # the two prompts that share any (the third, parting at once, has none to compare: not a 0)
    assert (
        table.splitlines()[-1]
        == "| fp8 against float32 | 1 of 3 | 1 (0) | 0.1250 (2) | 0.875 (1.500), 2 of 2 |"
    )
