"""`profile.live`: step records appended to steps.csv as they come (the same rows `write_run_dir` writes),
a throttled sink with the tok/s over the last second, off the engine's thread."""

import time

import pytest

from nvllm import SamplingParams
from nvllm.profiling.live import LiveSteps, TokenRate
from nvllm.profiling.timeline import STEP_FIELDS, write_rows
from tests.helpers.engine_utils import random_prompt, tiny_llm


def step(index: int, start_s: float, end_s: float, num_tokens: int) -> dict:
    record = dict.fromkeys(STEP_FIELDS, 0)
    record.update(step=index, start_s=start_s, end_s=end_s, kind="decode", num_tokens=num_tokens)
    record["device_ms"] = 1.5
    return record


def wait_for_lines(path, count: int, timeout_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while len(lines := path.read_text().splitlines() if path.exists() else []) < count:
        assert time.monotonic() < deadline, lines
        time.sleep(0.01)
    return lines


def test_token_rate_is_over_the_steps_of_the_last_second():
    rate = TokenRate(window_s=1.0)
    assert rate.add(step(0, 0.0, 0.5, 10)) == pytest.approx(10 / 0.5)  # half a second of timeline yet
    assert rate.add(step(1, 0.5, 1.0, 20)) == pytest.approx(30 / 1.0)
    assert rate.add(step(2, 1.0, 1.6, 30)) == pytest.approx(50 / 1.0)  # the step ending at 0.5 is out


def test_rows_are_appended_as_they_come_and_match_the_whole_file(tmp_path):
    records = [step(index, index * 0.1, index * 0.1 + 0.1, 4) for index in range(5)]
    live = LiveSteps(tmp_path)
    live.put(records[0])
    assert wait_for_lines(tmp_path / "steps.csv", 2)[0] == ",".join(STEP_FIELDS)  # before close
    for record in records[1:]:
        live.put(record)
    live.close()
    write_rows(tmp_path / "whole.csv", records, STEP_FIELDS)
    assert (tmp_path / "steps.csv").read_text() == (tmp_path / "whole.csv").read_text()


def test_a_restart_starts_the_file_again(tmp_path):
    live = LiveSteps(tmp_path)
    live.put(step(0, 0.0, 0.1, 4))
    live.restart()
    live.put(step(0, 0.0, 0.2, 8))
    live.close()
    write_rows(tmp_path / "whole.csv", [step(0, 0.0, 0.2, 8)], STEP_FIELDS)
    assert (tmp_path / "steps.csv").read_text() == (tmp_path / "whole.csv").read_text()


def test_the_sink_gets_at_most_the_points_a_second_asked_for(tmp_path):
    calls: list[float] = []
    live = LiveSteps(tmp_path, lambda point: calls.append(time.monotonic()), points_per_s=5)
    started = time.monotonic()
    for index in range(150):  # 1.5 s of steps every 10 ms
        live.put(step(index, index * 0.01, index * 0.01 + 0.01, 2))
        time.sleep(0.01)
    live.close()
    elapsed_s = time.monotonic() - started
    assert 3 <= len(calls) <= elapsed_s * 5 + 1
    assert all(later - earlier >= 0.2 - 1e-3 for earlier, later in zip(calls, calls[1:]))


def test_a_live_engine_streams_its_steps_while_it_generates(tmp_path):
    points: list[dict] = []
    with tiny_llm(profile=True, profile__live=True) as llm:
        llm.profiler.stream_to(LiveSteps(tmp_path, points.append, points_per_s=50))
        started = time.time()
        prompts = [random_prompt(24, seed) for seed in range(4)]
        llm.generate(prompts, SamplingParams(max_tokens=48, ignore_eos=True), use_tqdm=False)
        ended = time.time()
        llm.profiler.stop_stream()
        steps = llm.profiler.steps()
    write_rows(tmp_path / "whole.csv", steps, STEP_FIELDS)
    assert (tmp_path / "steps.csv").read_text() == (tmp_path / "whole.csv").read_text()
    assert {"wall_time", "tok_per_s", "kv_blocks_used", "num_running"} <= set(points[0])
    wall_times = [point["wall_time"] for point in points]
    assert started <= wall_times[0] and wall_times[-1] <= ended and wall_times == sorted(wall_times)
    assert wall_times[0] < started + (ended - started) / 2  # spread over the run, not all at its end
    assert all(point["tok_per_s"] > 0 for point in points)


def test_live_without_profiling_is_refused():
    with pytest.raises(ValueError, match="profile.live=true needs profile.enabled=true"):
        tiny_llm(profile__live=True)
