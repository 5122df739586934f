"""Start-up's prefill warm-up (`nvllm.runner.prefill_warm_up`): when it runs (`compile.prefill_warm_up`),
the step sizes it runs, and that running them leaves the engine as it was, also under tensor parallelism.
Its effect on the GPU (no Triton compile in later prefill steps) is
`tests/runner/test_prefill_warm_up_gpu.py`'s."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nvllm import SamplingParams
from nvllm.config import EngineConfig
from nvllm.engine.config_resolution import resolve
from nvllm.runner.prefill_warm_up import prefill_warm_up_tokens
from tests.helpers.engine_utils import random_prompt, tiny_llm


def resolved_warm_up(mode: str, device: str, compiled: bool | None = None) -> str:
    config = EngineConfig(device=device)
    compile_config = dataclasses.replace(config.compile, enabled=compiled, prefill_warm_up=mode)
    config = dataclasses.replace(config, compile=compile_config)
    resolved = resolve(config)
    assert resolve(resolved) == resolved  # resolving a resolved config changes nothing
    return resolved.compile.prefill_warm_up


@pytest.mark.parametrize(
    "mode, compiled, expected",
    [("auto", None, "off"), ("auto", True, "off"), ("on", None, "on"), ("off", True, "off")],
)
def test_on_the_cpu_the_warm_up_runs_only_when_asked_for(mode, compiled, expected):
    assert resolved_warm_up(mode, "cpu", compiled) == expected


@pytest.mark.parametrize(
    "mode, compiled, expected",
    [("auto", None, "on"), ("auto", False, "off"), ("on", False, "on"), ("off", None, "off")],
)
def test_auto_warms_up_where_the_model_is_compiled_on_cuda(monkeypatch, mode, compiled, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolved_warm_up(mode, "cuda", compiled) == expected


def test_an_unknown_warm_up_mode_is_refused():
    with pytest.raises(ValueError, match="compile.prefill_warm_up='always' must be auto, on or off"):
        resolved_warm_up("always", "cpu")


@pytest.mark.parametrize(
    "budget, tokens",
    [
        # each power of two from 8 up to the step's budget, then the budget itself; each also a token shorter
        (1000, [7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512, 999, 1000]),
        (128, [7, 8, 15, 16, 31, 32, 63, 64, 127, 128]),
        (40000, [n for p in range(3, 16) for n in (2**p - 1, 2**p)]),
        (5, [4, 5]),
    ],
)
def test_the_warm_up_takes_each_ladder_count_and_one_less_within_a_steps_budget(budget, tokens):
    assert prefill_warm_up_tokens(budget) == tokens


def test_the_warm_up_runs_a_prefill_of_each_count_through_the_model_and_leaves_the_engine_as_it_was():
    settings = dict(
        kvcache_block_size=16, num_kvcache_blocks=12, max_model_len=128, max_num_batched_tokens=600
    )
    greedy = SamplingParams(temperature=0, max_tokens=6)
    prompt = random_prompt(37, 0)
    with tiny_llm(**settings) as llm:
        runner = llm.model_runner
        layers = runner._attention_layers(runner.model)
        expected = llm.generate([prompt], greedy, use_tqdm=False)[0]["token_ids"]
        kv_before = [(layer.k_cache.clone(), layer.v_cache.clone()) for layer in layers]
        compile_s = runner.timings["compile_s"]
        step_tokens = []
        hook = runner.model.register_forward_pre_hook(lambda _, args: step_tokens.append(args[0].shape[0]))
        try:
            runner.warm_up_prefill()
        finally:
            hook.remove()
        assert step_tokens == prefill_warm_up_tokens(600)
        assert runner.timings["compile_s"] > compile_s  # its time is start-up's compile time
        # no KV written: the prefix cache's blocks (the prompt's) still hold what they held
        for (k_before, v_before), layer in zip(kv_before, layers):
            assert torch.equal(layer.k_cache, k_before) and torch.equal(layer.v_cache, v_before)
        assert llm.generate([prompt], greedy, use_tqdm=False)[0]["token_ids"] == expected
        assert llm.stats()["prefix_cache_hit_tokens"] > 0  # the second prompt was served from those blocks


@pytest.mark.parametrize("tensor_parallel_size", [1, 2])
def test_an_engine_warmed_up_at_start_up_generates_as_one_that_was_not(tensor_parallel_size):
    """Every rank runs the warm-up's steps at start-up (their all-reduces pair up; one rank alone would
    wait forever), and they change nothing the engine then computes."""
    settings = dict(
        kvcache_block_size=16,
        num_kvcache_blocks=24,
        max_model_len=128,
        max_num_batched_tokens=300,
        tensor_parallel_size=tensor_parallel_size,
    )
    greedy = SamplingParams(temperature=0, max_tokens=5, logprobs=3)
    prompts = [random_prompt(length, seed) for seed, length in enumerate((9, 40, 77))]
    outputs = {}
    for mode in ("off", "on"):
        with tiny_llm(compile__prefill_warm_up=mode, **settings) as llm:
            assert llm.config.compile.prefill_warm_up == mode
            outputs[mode] = llm.generate(prompts, greedy, use_tqdm=False)
    for warmed, cold in zip(outputs["on"], outputs["off"], strict=True):
        assert warmed["token_ids"] == cold["token_ids"]
        for warmed_top, cold_top in zip(warmed.outputs[0].logprobs, cold.outputs[0].logprobs, strict=True):
            assert warmed_top.keys() == cold_top.keys()
            assert all(warmed_top[t] == pytest.approx(cold_top[t], abs=1e-5) for t in cold_top)
