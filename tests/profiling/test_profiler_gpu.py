"""The profiler on a GPU: device time from CUDA events, the memory CUDA reports, MFU/MBU against the
table's peak, a trace with CUDA kernels, and the same tokens as without profiling."""

import json

import pytest

from nvllm import LLM, SamplingParams

pytestmark = pytest.mark.gpu

PROMPTS = [list(range(100 + i, 100 + i + n)) for i, n in enumerate([5, 37, 128, 300, 700, 20, 64, 90])]
PARAMS = SamplingParams(max_tokens=48, temperature=0, ignore_eos=True)
ENGINE = dict(max_num_seqs=64, max_model_len=2048, gpu_memory_utilization=0.5, seed=0)


def test_profiled_compiled_engine_on_the_gpu(tmp_path):
    with LLM("qwen3-0.6b", **ENGINE) as llm:
        expected = [output["token_ids"] for output in llm.generate(PROMPTS, PARAMS, use_tqdm=False)]
    with LLM("qwen3-0.6b", profile=True, profile__torch_trace_steps=2, **ENGINE) as llm:
        llm.generate(PROMPTS[:1], PARAMS, use_tqdm=False)
        llm.profiler.reset()
        outputs = llm.generate(PROMPTS, PARAMS, use_tqdm=False)
        profile, steps, stats = llm.profiler.as_dict(), llm.profiler.steps(), llm.stats()
        trace = llm.profiler.export_trace(tmp_path / "trace.json")
        peak_known = llm.device_peak is not None
    assert [output["token_ids"] for output in outputs] == expected  # profiling changes no token
    assert all(step["device_ms"] > 0 for step in steps)
    assert profile["device"]["decode"]["count"] > 0 and profile["device"]["prefill"]["count"] > 0
    memory = profile["memory"]
    assert memory["cuda_graph_pool_bytes"] > 0 and memory["activation_peak_bytes"] >= 0
    assert memory["peak_allocated_bytes"] >= memory["weights_bytes"] + memory["kv_cache_bytes"]
    if peak_known:
        assert 0 < stats["decode_mbu"] < 1 and 0 < stats["prefill_mfu"] < 1
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(event.get("cat") == "kernel" for event in events)
