"""The profiler against the engine's own counters and outputs: step records that add up to `stats()`, the
KV cache within capacity and empty at the end, preemptions forced by a tiny cache, request lifecycles in
order, stage totals that make up the wall time of `generate`, a torch trace of N steps, and nothing at all
recorded with profiling off."""

import json
import time

import pytest

from nvllm import SamplingParams
from nvllm.engine.config_resolution import engine_config
from nvllm.profiling import NullProfiler, Profiler
from nvllm.profiling.profiler import NoTraceWarning
from nvllm.profiling.stages import HOST_STAGES
from nvllm.profiling.torch_trace import STEP_RANGE
from tests.helpers.engine_utils import random_prompt, tiny_llm

NUM_REQUESTS = 8
SHARED_PREFIX = random_prompt(32, seed=100)  # two full blocks of 16: prefix-cache hits for later requests


def prompts() -> list[list[int]]:
    return [SHARED_PREFIX + random_prompt(4 + 3 * i, seed=i) for i in range(NUM_REQUESTS)]


@pytest.fixture(scope="module")
def profiled_run():
    """A run on a KV cache too small for every request at once (12 blocks of 16 tokens): preemptions."""
    with tiny_llm(profile=True, kvcache_block_size=16, num_kvcache_blocks=12, max_num_seqs=8) as llm:
        llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2), use_tqdm=False)
        llm.profiler.reset()  # what was recorded before is forgotten
        time.sleep(0.5)  # the caller's time before `generate` is not the engine's
        stats_before = llm.stats()
        start = time.perf_counter()
        outputs = llm.generate(prompts(), SamplingParams(max_tokens=24, ignore_eos=True), use_tqdm=False)
        wall_s = time.perf_counter() - start
        stats = llm.stats()
        delta = {
            key: stats[key] - stats_before[key]
            for key in ("prefill_tokens", "decode_tokens", "num_preemptions")
        }
        yield {
            "llm": llm,
            "outputs": outputs,
            "wall_s": wall_s,
            "delta": delta,
            "hit_tokens": llm.block_manager.num_hit_tokens,
            "steps": llm.profiler.steps(),
            "requests": llm.profiler.requests(),
            "profile": llm.profiler.as_dict(),
            "summary": llm.profiler.summary(),
        }


def test_step_records_add_up_to_the_engines_counters(profiled_run):
    steps, delta = profiled_run["steps"], profiled_run["delta"]
    assert delta["num_preemptions"] > 0  # the tiny cache forced some
    assert sum(step["num_tokens"] for step in steps) == delta["prefill_tokens"] + delta["decode_tokens"]
    prefill_tokens = sum(step["num_tokens"] for step in steps if step["kind"] == "prefill")
    assert prefill_tokens == delta["prefill_tokens"]
    assert sum(step["num_preemptions"] for step in steps) == delta["num_preemptions"]
    assert [step["step"] for step in steps] == list(range(len(steps)))
    for step in steps:
        assert step["kv_blocks_used"] + step["kv_blocks_free"] == 12 and 0 <= step["kv_blocks_used"] <= 12
        assert step["start_s"] <= step["end_s"] and step["device_ms"] > 0
        assert (step["num_decode_steps"] == 0) == (step["kind"] == "prefill")
    assert max(step["kv_blocks_used"] for step in steps) == 12
    assert steps[-1]["kv_blocks_used"] == 0 and steps[-1]["num_running"] == steps[-1]["num_waiting"] == 0
    assert all(later["start_s"] >= earlier["end_s"] for earlier, later in zip(steps, steps[1:]))


def test_request_records_follow_each_request(profiled_run):
    requests, outputs = profiled_run["requests"], profiled_run["outputs"]
    assert len(requests) == NUM_REQUESTS
    assert [r["prompt_len"] for r in requests] == [len(p) for p in prompts()]
    assert [r["output_len"] for r in requests] == [len(output["token_ids"]) for output in outputs]
    for r in requests:
        assert r["arrival_s"] <= r["first_scheduled_s"] <= r["first_token_s"] <= r["finish_s"]
        assert r["num_preemptions"] == len(r["preempted_s"]) == len(r["resumed_s"])
        assert len(r["prefill_done_s"]) == 1 + r["num_preemptions"]  # every admission computes its prompt
        for preempted, resumed in zip(r["preempted_s"], r["resumed_s"]):
            assert r["first_token_s"] <= preempted <= resumed <= r["finish_s"]
    assert sum(r["num_preemptions"] for r in requests) == profiled_run["delta"]["num_preemptions"]
    # the prefix cache's hits, request by request and step by step (the warm-up hit nothing)
    assert sum(r["cached_tokens"] for r in requests) == profiled_run["hit_tokens"] > 0
    assert sum(step["num_prefix_hit_tokens"] for step in profiled_run["steps"]) == profiled_run["hit_tokens"]


def test_stage_totals_make_up_the_wall_time_of_generate(profiled_run):
    profile, wall_s = profiled_run["profile"], profiled_run["wall_s"]
    assert set(profile) >= {"stages", "memory"} and list(profile["stages"]) == list(HOST_STAGES)
    total_s = sum(stage["total_s"] for stage in profile["stages"].values())
    assert abs(total_s - wall_s) <= 0.1 * wall_s and profile["wall_s"] == pytest.approx(total_s)
    for name in (
        "add_requests",
        "schedule",
        "build_inputs",
        "launch",
        "sample",
        "wait_collect",
        "postprocess",
    ):
        stage = profile["stages"][name]
        assert stage["count"] > 0 and stage["total_s"] > 0 and stage["p50_ms"] <= stage["p99_ms"]
        assert stage["mean_ms"] == pytest.approx(stage["total_s"] * 1e3 / stage["count"])
    assert profile["stages"]["detokenize"]["count"] == 1
    steps = profiled_run["steps"]
    for kind in ("prefill", "decode"):
        device = profile["device"][kind]
        assert device["count"] == sum(step["kind"] == kind for step in steps)
        kind_ms = sum(step["device_ms"] for step in steps if step["kind"] == kind)
        assert device["total_s"] == pytest.approx(kind_ms / 1e3)
    memory = profile["memory"]
    llm = profiled_run["llm"]
    kv_bytes = sum(
        layer.k_cache.nbytes + layer.v_cache.nbytes
        for layer in llm.model_runner._attention_layers(llm.model_runner.model)
    )
    weights = sum(p.nbytes for p in llm.model_runner.model.parameters())
    assert memory["kv_cache_bytes"] == kv_bytes and memory["weights_bytes"] == weights
    assert memory["peak_allocated_bytes"] is None and memory["activation_peak_bytes"] is None  # a CPU
    json.dumps(profile)  # plain values only


def test_summary_is_a_table_of_every_stage(profiled_run):
    summary = profiled_run["summary"]
    assert isinstance(summary, str)
    for row in (
        "host: schedule",
        "host: launch",
        "host: wait_collect",
        "device: prefill step",
        "device: decode round",
    ):
        assert row in summary
    assert "weights" in summary and "KV cache" in summary


def test_reset_clears_everything():
    with tiny_llm(profile=True) as llm:
        llm.generate([random_prompt(8, seed=1)], SamplingParams(max_tokens=3), use_tqdm=False)
        assert llm.profiler.steps() and llm.profiler.requests()
        llm.profiler.reset()
        assert llm.profiler.steps() == [] and llm.profiler.requests() == []
        assert all(stage["count"] == 0 for stage in llm.profiler.as_dict()["stages"].values())


def test_profiling_off_records_nothing():
    with tiny_llm() as llm:
        assert isinstance(llm.profiler, NullProfiler) and not llm.profiler.enabled
        llm.generate([random_prompt(8, seed=1)], SamplingParams(max_tokens=5), use_tqdm=False)
        assert llm.profiler.steps() == [] and llm.profiler.requests() == []
        assert llm.profiler.as_dict()["stages"] == {} and "off" in llm.profiler.summary()
        with pytest.warns(NoTraceWarning, match="profiling is off"):
            assert llm.profiler.export_trace("unused.json") is None


def test_flat_and_grouped_names_turn_it_on():
    assert engine_config("tiny", profile=True).profile.enabled
    assert engine_config("tiny", profile__enabled=True).profile.enabled
    with tiny_llm(profile=True) as llm:
        assert isinstance(llm.profiler, Profiler)


def test_a_trace_without_profiling_is_refused():
    with pytest.raises(ValueError, match="profile.torch_trace_steps=2 needs profile.enabled=true"):
        tiny_llm(profile__torch_trace_steps=2)
    with pytest.raises(ValueError, match="profile.torch_trace_steps"):
        tiny_llm(profile=True, profile__torch_trace_steps=-1)


def test_torch_trace_records_the_steps_asked_for(tmp_path):
    with tiny_llm(profile=True, profile__torch_trace_steps=2, profile__torch_trace_start_step=1) as llm:
        llm.generate(
            [random_prompt(8, seed=2)], SamplingParams(max_tokens=40, ignore_eos=True), use_tqdm=False
        )
        assert len(llm.profiler.steps()) > 3
        path = llm.profiler.export_trace(tmp_path / "trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(event.get("name") == STEP_RANGE for event in events) == 2
    assert any(event.get("name", "").startswith("aten::") for event in events)  # the model's own ops


def test_a_tensor_parallel_engine_is_profiled_on_rank_0():
    with tiny_llm(profile=True, tensor_parallel_size=2) as llm:
        llm.generate(prompts()[:3], SamplingParams(max_tokens=6, ignore_eos=True), use_tqdm=False)
        stats, steps, memory = llm.stats(), llm.profiler.steps(), llm.profiler.as_dict()["memory"]
        runner = llm.model_runner.runner
        kv_bytes = sum(
            layer.k_cache.nbytes + layer.v_cache.nbytes for layer in runner._attention_layers(runner.model)
        )
    assert sum(step["num_tokens"] for step in steps) == stats["prefill_tokens"] + stats["decode_tokens"]
    assert memory["kv_cache_bytes"] == kv_bytes  # rank 0's half of the KV heads
    assert len(llm.profiler.requests()) == 3
