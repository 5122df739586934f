"""`nvllm::add_rms_norm`: the residual add and RMSNorm as one op, which compiled graphs take (eager mode the
module's torch), against the module and, on the GPU, its Triton kernel against float64."""

import pytest
import torch

from nvllm.layers import norm as norm_module
from nvllm.layers.norm import RMSNorm
from nvllm.ops.norm_ops import add_rms_norm


def filled_norm(width: int, dtype: torch.dtype) -> RMSNorm:
    norm = RMSNorm(width, 1e-6).to(dtype)
    norm.weight.data.uniform_(0.5, 1.5)
    return norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_op_on_the_cpu_is_the_module_exactly(dtype):
    torch.manual_seed(0)
    norm = filled_norm(48, dtype)
    x, residual = torch.randn(5, 48).to(dtype), torch.randn(5, 48).to(dtype)
    normed, summed = add_rms_norm(x, residual, norm.weight, norm.eps)
    expected_normed, expected_summed = norm(x, residual)
    assert normed.dtype == dtype and torch.equal(normed, expected_normed)
    assert torch.equal(summed, expected_summed)
    assert torch.equal(summed, (x.float() + residual.float()).to(dtype))


def test_compiled_norm_calls_the_op_and_eager_the_torch_math(monkeypatch):
    torch.manual_seed(0)
    norm = filled_norm(16, torch.float32)
    x, residual = torch.randn(3, 16), torch.randn(3, 16)
    ops_in_graph = []

    def record_ops(graph_module, example_inputs):
        ops_in_graph.extend(node.target for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module.forward

    expected = norm(x, residual)
    got = torch.compile(norm, backend=record_ops, fullgraph=True)(x, residual)
    assert torch.ops.nvllm.add_rms_norm.default in ops_in_graph
    assert all(torch.equal(a, b) for a, b in zip(got, expected))

    def no_op_in_eager(*args):
        raise AssertionError("an eager norm went through nvllm::add_rms_norm")

    monkeypatch.setattr(norm_module, "add_rms_norm", no_op_in_eager)
    assert all(torch.equal(a, b) for a, b in zip(norm(x, residual), expected))


@pytest.mark.gpu
@pytest.mark.parametrize("width", [1024, 4096, 1000])
def test_triton_kernel_matches_a_float64_reference(width):
    torch.manual_seed(0)
    weight = torch.rand(width, device="cuda", dtype=torch.bfloat16) + 0.5
    for rows in (1, 7, 300, 4096):
        x, residual = (torch.randn(rows, width, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        normed, summed = add_rms_norm(x, residual, weight, 1e-6)
        exact_sum = x.double() + residual.double()
        exact = exact_sum * torch.rsqrt(exact_sum.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.double()
        assert torch.equal(summed, exact_sum.to(torch.bfloat16))  # one rounding of an exact bf16 sum
        # one bf16 rounding of a value of std about 1
        torch.testing.assert_close(normed.double(), exact, atol=2e-2, rtol=1e-2, msg=f"{rows} rows")
