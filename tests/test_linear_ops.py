"""`nvllm::linear`: the skinny Triton matmul that small decode batches take, against an fp32 matmul; the
layers take the op only inside compiled graphs."""

import pytest
import torch
import torch.nn.functional as F

from nvllm.layers.linear import ColumnParallelLinear
from nvllm.ops import linear_ops
from nvllm.ops.linear_ops import SKINNY_MAX_ROWS, linear, uses_skinny_matmul

# Qwen3-0.6B's and -8B's layer matmuls and LM head (out, in), and an odd shape that needs every mask
SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (151936, 1024), (6144, 4096), (1000, 200)]


def test_cpu_batches_take_f_linear():
    x = torch.zeros(4, 8)
    assert not uses_skinny_matmul(x, None)  # on the CPU
    torch.testing.assert_close(linear(x + 1, torch.ones(3, 8)), torch.full((4, 3), 8.0))


def test_compiled_layers_call_the_op_and_eager_layers_call_f_linear(monkeypatch):
    layer = ColumnParallelLinear(8, 3)
    layer.weight.data.fill_(1.0)
    x = torch.ones(4, 8)
    ops_in_graph = []

    def record_ops(graph_module, example_inputs):
        ops_in_graph.extend(node.target for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module.forward

    compiled = torch.compile(layer, backend=record_ops, fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.full((4, 3), 8.0))
    assert torch.ops.nvllm.linear.default in ops_in_graph

    def no_op_in_eager(*args):
        raise AssertionError("an eager layer went through nvllm::linear")

    monkeypatch.setattr(linear_ops, "linear", no_op_in_eager)
    torch.testing.assert_close(layer(x), torch.full((4, 3), 8.0))


@pytest.mark.gpu
@pytest.mark.parametrize("out_features, in_features", SHAPES)
def test_skinny_matmul_matches_a_float32_matmul(out_features, in_features):
    torch.manual_seed(0)
    weight = torch.randn(out_features, in_features, device="cuda", dtype=torch.bfloat16) / in_features**0.5
    for num_rows in (1, 2, 5, 16, SKINNY_MAX_ROWS + 1):
        x = torch.randn(num_rows, in_features, device="cuda", dtype=torch.bfloat16)
        expected = F.linear(x.float(), weight.float())
        assert uses_skinny_matmul(x, None) == (num_rows <= SKINNY_MAX_ROWS)
        got = linear(x, weight)
        assert got.dtype == torch.bfloat16 and got.shape == expected.shape
        # bf16 output rounding (~0.4 % of a value of std 1), accumulation in fp32
        torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=1e-2)
    strided = torch.randn(3, 2 * in_features, device="cuda", dtype=torch.bfloat16)[
        :, ::2
    ]  # rows not contiguous
    torch.testing.assert_close(
        linear(strided, weight).float(), F.linear(strided.float(), weight.float()), atol=2e-2, rtol=1e-2
    )


@pytest.mark.gpu
def test_every_chosen_skinny_configuration_computes_the_matmul():
    """Each block configuration the table picks, run directly (`linear` may leave a shape to cuBLAS)."""
    from nvllm.ops.skinny_matmul import CONFIGS, DEFAULT_CONFIG, skinny_matmul

    torch.manual_seed(0)
    weight = torch.randn(1000, 520, device="cuda", dtype=torch.bfloat16) / 520**0.5  # every mask in play
    x = torch.randn(SKINNY_MAX_ROWS, 520, device="cuda", dtype=torch.bfloat16)
    for config in {c for c in CONFIGS.values() if c is not None} | {DEFAULT_CONFIG}:
        for num_rows in (1, 2, SKINNY_MAX_ROWS):
            got = skinny_matmul(x[:num_rows], weight, config).float()
            expected = F.linear(x[:num_rows].float(), weight.float())
            torch.testing.assert_close(got, expected, atol=2e-2, rtol=1e-2, msg=f"{config}, {num_rows} rows")
