"""What the profiler tells a user who looks: a phase's rate beside a time printed precisely enough to
check it, and a word when no torch trace was taken."""

import pytest

from nvllm import SamplingParams
from nvllm.profiling.phases import format_phases
from nvllm.profiling.profiler import NoTraceWarning
from tests.helpers.engine_utils import random_prompt, tiny_llm


def step(kind: str, start_s: float, end_s: float, num_tokens: int) -> dict:
    return dict(kind=kind, start_s=start_s, end_s=end_s, num_seqs=1, num_tokens=num_tokens, device_ms=None)


def test_a_phase_shorter_than_a_millisecond_shows_its_time_and_a_rate_that_matches():
    table = format_phases([step("prefill", 0.0, 0.0003, 200), step("decode", 0.0003, 0.0003, 1)])
    rows = {line.split("  ")[0].strip(): line.split() for line in table.splitlines()[2:]}
    assert rows["prefill"][-5:-2] == ["0.0003", "100.0%", "200"]
    assert rows["prefill"][-2] == "666,667"  # 200 tokens / 0.0003 s, as printed
    assert rows["decode, full batch"][-5] == "0.000" and rows["decode, full batch"][-2] == "-"  # no time


def test_a_run_shorter_than_the_trace_start_says_why_no_trace_was_written(tmp_path):
    with tiny_llm(profile=True, profile__torch_trace_steps=2, profile__torch_trace_start_step=1000) as llm:
        llm.generate(
            [random_prompt(8, seed=2)], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False
        )
        steps = len(llm.profiler.steps())
        with pytest.warns(NoTraceWarning, match=f"{steps} engine steps, fewer than .*start_step=1000"):
            assert llm.profiler.export_trace(tmp_path / "trace.json") is None
    assert not (tmp_path / "trace.json").exists()
    with tiny_llm() as llm, pytest.warns(NoTraceWarning, match="profiling is off"):
        assert llm.profiler.export_trace(tmp_path / "trace.json") is None
