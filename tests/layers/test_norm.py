"""RMSNorm's choice, in a compiled graph, between the add + norm kernel (`nvllm::add_rms_norm`) and leaving
both to inductor (`fuse_in_graph`, fp8 models): a batch small enough for the skinny kernel has no activation
quantization to fuse, so it keeps the kernel, unless small batches quantize too (`model.fp8_activations`).
The traced graph is the oracle."""

import pytest
import torch

from nvllm.layers import norm
from nvllm.layers.norm import RMSNorm


def traced_ops(module: RMSNorm, rows: int) -> set:
    graphs = []

    def record(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    x, residual = torch.randn(rows, 64), torch.randn(rows, 64)
    out, new_residual = torch.compile(module, backend=record, fullgraph=True)(x, residual)
    expected, expected_residual = module(x, residual)  # eager: the reference
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(new_residual, expected_residual)
    return {node.target for graph in graphs for node in graph.graph.nodes if node.op == "call_function"}


@pytest.mark.parametrize(
    "fuse_in_graph, small_batches_quantize, skinny, kernel",
    [
        (False, False, False, True),
        (True, False, False, False),
        (True, False, True, True),
        (True, True, True, False),  # `model.fp8_activations`: small batches quantize too
        (False, True, True, True),
    ],
)
def test_the_add_and_norm_kernel_is_kept_unless_inductor_has_something_to_fuse(
    fuse_in_graph, small_batches_quantize, skinny, kernel, monkeypatch
):
    # the skinny kernel's test needs CUDA; here it is stood in for, as it answers for this batch
    monkeypatch.setattr(norm, "uses_skinny_matmul", lambda x: skinny)
    module = RMSNorm(64, fuse_in_graph=fuse_in_graph, small_batches_quantize=small_batches_quantize)
    ops = traced_ops(module, rows=4)
    assert (torch.ops.nvllm.add_rms_norm.default in ops) == kernel
