"""A job's run dir while the job goes: with `profile.live` its step records stream into `steps.csv` and, a
few points a second, into the job's wandb run (`live/*`, against `live/time_s`); when the job ends,
finished or failed, the end marker says so to whoever follows the run dir's files."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import wandb

from nvllm import LLM
from nvllm.profiling.live import LiveSteps
from nvllm.profiling.timeline import END_MARKER

TIMELINE_SKIPPED = ("step", "start_s", "end_s", "kind")


def timeline_values(step: dict) -> dict:
    """A step record as wandb time-series values: its numbers, `time_s` (its end) and `is_prefill`."""
    values = {key: value for key, value in step.items() if key not in TIMELINE_SKIPPED}
    values.update(time_s=step["end_s"], is_prefill=int(step["kind"] == "prefill"))
    return values


@contextmanager
def end_marked(run_dir: Path) -> Iterator[None]:
    """`END_MARKER` written into `run_dir` when the block ends, however it ends (one left by an earlier
    run into the same dir removed first, so that a follower does not stop at once)."""
    marker = Path(run_dir) / END_MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    status = "failed"
    try:
        yield
        status = "finished"
    finally:
        marker.write_text(status + "\n")


@contextmanager
def live_steps(llm: LLM, run_dir: Path, wandb_job: wandb.Run) -> Iterator[None]:
    """With `profile.live`: the engine's step records streamed into `run_dir` and `wandb_job` for the
    block, the stream closed (its rows all written) when it ends. Nothing otherwise."""
    if not llm.config.profile.live:
        yield
        return
    wandb_job.define_metric("live/*", step_metric="live/time_s")

    def log(point: dict) -> None:
        wandb_job.log({f"live/{key}": value for key, value in timeline_values(point).items()})

    llm.profiler.stream_to(LiveSteps(run_dir, log))
    try:
        yield
    finally:
        llm.profiler.stop_stream()
