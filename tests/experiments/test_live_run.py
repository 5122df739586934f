"""`profile.live` through the harness: wandb gets the step records while the job runs, steps.csv keeps
the rows of a run killed half-way, and the end marker appears when a job ends."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.harness import live as harness_live
from experiments.harness.job import job_run, prepare_job
from experiments.runners import bench
from nvllm.profiling.live import LiveSteps
from nvllm.profiling.timeline import END_MARKER, STEP_FIELDS, read_rows
from nvllm.run import compose_config
from tests.helpers.experiment_utils import TINY, run_file_holding

REPO_ROOT = Path(__file__).resolve().parents[2]
LONG_WORKLOAD = ["workload.num_seqs=4", "workload.input_len=32", "workload.output_len=400"]


def test_wandb_gets_the_steps_while_the_job_runs(tmp_path, monkeypatch):
    calls: list[tuple[float, dict]] = []  # each sink call's wall time and point

    class TimedLiveSteps(LiveSteps):
        def __init__(self, run_dir, sink, points_per_s=20.0):
            super().__init__(run_dir, lambda point: (calls.append((time.time(), point)), sink(point)), 20.0)

    monkeypatch.setattr(harness_live, "LiveSteps", TimedLiveSteps)
    cfg = compose_config(["+experiment=profile", *TINY, *LONG_WORKLOAD, "profile.torch_trace_steps=0"])
    assert cfg.profile.live
    started = time.time()
    bench.run(cfg, tmp_path, name="test-live")
    ended = time.time()
    assert len(calls) >= 3
    called = [called_at for called_at, _ in calls]
    assert all(abs(called_at - point["wall_time"]) < 1.0 for called_at, point in calls)  # as they happen
    assert called[0] < started + (ended - started) / 2  # spread over the run, not all after it
    assert (tmp_path / END_MARKER).read_text() == "finished\n"
    run_file_holding(tmp_path, b"live/tok_per_s", b"live/kv_blocks_used", b"timeline/num_tokens")


def test_a_run_killed_half_way_leaves_its_rows(tmp_path):
    command = [sys.executable, "-m", "nvllm.run", "+experiment=profile", *TINY, *LONG_WORKLOAD]
    command += ["wandb.mode=disabled", "workload.num_seqs=16", "workload.output_len=1000"]
    command += [f"hydra.run.dir={tmp_path}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL)
    steps = tmp_path / "steps.csv"
    try:
        deadline = time.monotonic() + 240
        while not (steps.exists() and len(steps.read_text().splitlines()) > 5):
            assert process.poll() is None and time.monotonic() < deadline, "no rows before the end"
            time.sleep(0.05)
    finally:
        still_running = process.poll() is None
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert still_running
    text = steps.read_text()
    assert text.splitlines()[0] == ",".join(STEP_FIELDS) and text.endswith("\n")
    rows = read_rows(steps, STEP_FIELDS)  # every row whole: each field parses
    assert len(rows) > 4 and [row["step"] for row in rows] == list(range(len(rows)))
    assert not (tmp_path / END_MARKER).exists() and not (tmp_path / "profile.json").exists()  # not its end


def test_the_end_marker_says_a_failed_job_ended(tmp_path):
    cfg = compose_config(["+experiment=bench", *TINY, "wandb.mode=disabled", "profile.enabled=true"])
    (tmp_path / END_MARKER).write_text("finished\n")  # an earlier run's
    with pytest.raises(RuntimeError, match="half-way"):
        with job_run(prepare_job(cfg, tmp_path, None, job_type="bench")):
            assert not (tmp_path / END_MARKER).exists()
            raise RuntimeError("half-way")
    assert (tmp_path / END_MARKER).read_text() == "failed\n"
