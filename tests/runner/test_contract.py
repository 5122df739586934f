"""Every runner the engine can hold keeps the `Runner` contract: `ModelRunner`, and `TensorParallelRunner` at
TP=2 (gloo, CPU): each declared attribute is there with its declared type and the engine's values, each
method takes the contract's parameters, and `execute` samples a step's tokens itself."""

from __future__ import annotations

import inspect
import types
import typing

import pytest
import torch

from nvllm import SamplingParams
from nvllm.runner.contract import Runner, runner_attributes
from nvllm.runner.memory import weight_bytes
from nvllm.sampling.sampler import Sampler
from tests.helpers.engine_utils import random_prompt, tiny_llm

SETTINGS = dict(kvcache_block_size=16, num_kvcache_blocks=12, max_model_len=128)


def declared_type(hint) -> type | types.UnionType:
    """What `isinstance` can check of an annotation (`dict[str, float]` -> dict, `int | None` as is)."""
    origin = typing.get_origin(hint)
    return hint if origin in (None, types.UnionType) else origin


def assert_keeps_the_contract(runner) -> None:
    assert isinstance(runner, Runner)
    hints = typing.get_type_hints(Runner)
    for name in runner_attributes():
        value = getattr(runner, name)
        assert isinstance(value, declared_type(hints[name])), f"{name}={value!r} is not a {hints[name]}"
    for method in ("execute", "wait_for_device", "shutdown"):
        declared = list(inspect.signature(getattr(Runner, method)).parameters.values())[1:]
        actual = list(inspect.signature(getattr(runner, method)).parameters.values())
        assert [p.name for p in actual[: len(declared)]] == [p.name for p in declared], method
        assert all(p.default is not inspect.Parameter.empty for p in actual[len(declared) :]), method


def sampled_through_the_contract(llm, prompts: list[list[int]]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The tokens `execute` returns for one prefill step of `prompts` sampled greedily, and the logits its
    sampling saw (through `wrap_sample`)."""
    for prompt in prompts:
        llm.add_request(prompt, SamplingParams(max_tokens=1))
    steps = llm.inputs.build(llm.scheduler.schedule())
    greedy = [SamplingParams(temperature=0)] * len(prompts)
    sampling = Sampler.prepare(greedy, [None] * len(prompts), llm.device, num_rows=steps[0].num_logits)
    seen = []

    def keeping_logits(sample):
        def sample_keeping_logits(logits: torch.Tensor, step: int) -> torch.Tensor:
            seen.append(logits)
            return sample(logits, step)

        return sample_keeping_logits

    tokens = llm.model_runner.execute(steps, sampling, keeping_logits)
    llm.abort_all()
    return tokens, seen


@pytest.mark.parametrize("tensor_parallel_size", [1, 2])
def test_every_runner_keeps_the_contract(tensor_parallel_size):
    with tiny_llm(tensor_parallel_size=tensor_parallel_size, **SETTINGS) as llm:
        runner = llm.model_runner
        assert_keeps_the_contract(runner)
        assert (runner.device, runner.dtype, runner.num_blocks) == ("cpu", torch.float32, 12)
        assert runner.backend is llm.inputs.backend  # the step builder plans with the runner's backend
        assert set(runner.timings) == {"load_s", "compile_s", "capture_s"}
        # rank 0's share of the parameters (the norms, a few hundred bytes, are not sharded)
        assert runner.weight_bytes == pytest.approx(weight_bytes(llm.config, runner.dtype), rel=1e-3)
        tokens, seen = sampled_through_the_contract(llm, [random_prompt(7, 1), random_prompt(9, 2)])
        assert len(seen) == 1 and tokens.shape == (seen[0].shape[0], 1)
        assert tokens[:, 0].tolist() == seen[0].argmax(-1).tolist()
