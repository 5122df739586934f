"""`inference_op`: an op defined on nvllm's library fragment computes what its function computes, eagerly and
inside a graph compiled by torch.compile (traced with its fake), and mutates in place exactly the arguments
it names."""

import pytest
import torch

from nvllm.ops.op_library import inference_op, register_fake


@inference_op("test_scale_and_count", mutates_args=("counts",))
def scale_and_count(x: torch.Tensor, factor: float, counts: torch.Tensor) -> torch.Tensor:
    counts.add_(1)
    return torch.from_numpy(x.numpy() * factor)  # real data only, as a kernel: tracing needs the fake


@register_fake(scale_and_count)
def _(x, factor, counts):
    return torch.empty_like(x)


def twice(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return scale_and_count(scale_and_count(x, 2.0, counts), 3.0, counts) + 1


def test_the_op_computes_its_function_and_mutates_what_it_names():
    x, counts = torch.arange(4.0), torch.zeros(2)
    assert torch.equal(twice(x, counts), x * 6 + 1)
    assert counts.tolist() == [2.0, 2.0]
    expected = "nvllm::test_scale_and_count(Tensor x, float factor, Tensor(a2!) counts) -> Tensor"
    assert str(scale_and_count._schema) == expected


@pytest.mark.parametrize("length", [3, 5])
def test_the_op_inside_a_compiled_graph_mutates_in_place_as_eagerly(length):
    compiled = torch.compile(twice, dynamic=True, fullgraph=True)
    x, counts = torch.arange(float(length)), torch.zeros(1)
    with torch.no_grad():
        assert torch.equal(compiled(x, counts), x * 6 + 1)
    assert counts.tolist() == [2.0]  # each call's write reached the caller's tensor
