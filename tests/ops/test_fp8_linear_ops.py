"""`nvllm::scaled_mm`: in a graph compiled by inductor the per-token activation quantization is traced code
ahead of the op (fused with the norm and the SwiGLU activation that produce the activations), and the op
receives exactly `quantize_rows` of its input; a compiled fp8 engine computes what an eager one does. On the
GPU, the compiled matmuls against an fp32 matmul: tests/layers/test_fp8.py."""

from __future__ import annotations

import torch

from nvllm.layers.linear import GateUpSiluParallelLinear, RowParallelLinear
from nvllm.layers.norm import RMSNorm
from nvllm.ops import fp8, fp8_linear_ops
from nvllm.ops.fp8 import quantize_rows
from tests.helpers.engine_utils import random_prompt, tiny_llm
from tests.helpers.parallel_oracle import prefill_logits


def mlp_block(hidden: int, intermediate: int):
    """An MLP with fp8 weights behind the residual add and RMSNorm that produce its input, as in a decoder
    layer with `model.quantization=fp8`."""
    torch.manual_seed(0)
    norm = RMSNorm(hidden, fuse_in_graph=True)
    norm.weight.data.uniform_(0.8, 1.2)
    gate_up = GateUpSiluParallelLinear(hidden, intermediate, quantization="fp8")
    for shard in range(2):
        gate_up.weight_loader(gate_up.weight, torch.randn(intermediate, hidden) / hidden**0.5, shard)
    down = RowParallelLinear(intermediate, hidden, quantization="fp8")
    down.weight_loader(down.weight, torch.randn(hidden, intermediate) / intermediate**0.5)

    def block(x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        normed, residual = norm(x, residual)
        return down(gate_up(normed)), residual

    return block


def test_inductor_quantizes_the_activations_as_quantize_rows_and_hands_them_to_the_op(monkeypatch):
    block = mlp_block(hidden=64, intermediate=96)
    received = []
    computation = fp8_linear_ops.fp8_matmul_of_quantized

    def recording(x, x_q, x_scale, weight, weight_scale, bias=None, quantize_activations=False):
        received.append((x.clone(), x_q.clone(), x_scale.clone()))
        return computation(x, x_q, x_scale, weight, weight_scale, bias, quantize_activations)

    monkeypatch.setattr(fp8_linear_ops, "fp8_matmul_of_quantized", recording)
    quantizations_at_run_time = []

    def counted_quantize_rows(matrix):
        if not torch.compiler.is_compiling():  # a Python call at run time, not inductor's generated code
            quantizations_at_run_time.append(matrix.shape)
        return quantize_rows(matrix)

    monkeypatch.setattr(fp8, "quantize_rows", counted_quantize_rows)
    # rows of very different magnitudes: each gets its own scale
    x = torch.randn(6, 64) * torch.logspace(-2, 2, 6)[:, None]
    residual = torch.randn(6, 64)
    torch._dynamo.reset()
    ours = torch.compile(block, fullgraph=True, dynamic=True)(x, residual)
    assert not quantizations_at_run_time
    assert len(received) == 2  # the gate/up and the down projections
    for activations, x_q, x_scale in received:
        expected_q, expected_scale = quantize_rows(activations)
        assert torch.equal(x_scale, expected_scale)
        assert torch.equal(x_q.view(torch.uint8), expected_q.view(torch.uint8))
    monkeypatch.undo()
    torch.testing.assert_close(ours, block(x, residual), rtol=1e-5, atol=1e-5)


def test_the_fp8_block_leaves_the_norm_the_activation_and_the_quantization_to_inductor():
    """Only the matmuls are custom ops: inductor sees what produces their activations, so it can fuse the
    quantization into the norm's and the activation's kernels."""
    block = mlp_block(hidden=64, intermediate=96)
    custom_ops = []

    def record_custom_ops(graph_module, example_inputs):
        targets = (node.target for node in graph_module.graph.nodes if node.op == "call_function")
        custom_ops.extend(target for target in targets if getattr(target, "namespace", None) == "nvllm")
        return graph_module.forward

    torch.compile(block, backend=record_custom_ops, fullgraph=True)(torch.randn(5, 64), torch.randn(5, 64))
    assert custom_ops == [torch.ops.nvllm.scaled_mm.default] * 2


def test_compiled_fp8_engine_generates_what_the_eager_one_does():
    prompts = [random_prompt(length, seed=80 + length) for length in (6, 21)]
    settings = dict(
        model__quantization="fp8", kvcache_block_size=16, num_kvcache_blocks=16, max_model_len=128
    )
    with tiny_llm(**settings) as llm:
        expected = prefill_logits(llm, prompts)
    with tiny_llm(compile__enabled=True, **settings) as llm:
        layer = llm.model_runner.model.model.layers[0]
        assert layer.input_layernorm.fuse_in_graph and layer.post_attention_layernorm.fuse_in_graph
        torch.testing.assert_close(prefill_logits(llm, prompts), expected, rtol=1e-4, atol=1e-4)
