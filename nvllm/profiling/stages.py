"""Host time by stage, and the statistics of a list of durations."""

from __future__ import annotations

import time

import numpy as np

# The engine's host stages, in the order a step passes them. `other` is whatever runs between the
# engine's own stages (the progress bar, the caller's loop between manual steps).
HOST_STAGES = (
    "add_requests",  # tokenize and check the requests, queue them
    "schedule",  # pick the batch (block allocation and preemption included)
    "build_inputs",  # step inputs: ids, positions, slots, block tables
    "launch",  # queue the model's steps on the device (a CPU runs them here)
    "sample",  # prepare the sampler and queue its work for each step
    "wait_collect",  # wait for the batch's tokens and copy them to Python
    "postprocess",  # append tokens, stop, free blocks, publish prefix-cache hashes
    "detokenize",  # the outputs' text
    "profiler",  # the profiler's own records of a step
    "other",
    "idle",  # a served engine waiting for requests (nvllm/serving/engine_child.py)
)


class StageClock:
    """Each `lap(stage)` gives the time since the previous lap to `stage`: the stages partition the time
    from `restart()` on, so their totals add up to it."""

    def __init__(self):
        self.samples: dict[str, list[float]] = {stage: [] for stage in HOST_STAGES}
        self._last = time.perf_counter()

    def restart(self) -> None:
        """Start counting from now (the time since the last lap belongs to no stage)."""
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.samples[stage].append(now - self._last)
        self._last = now

    @property
    def total_s(self) -> float:
        return sum(sum(samples) for samples in self.samples.values())


def describe(seconds: list[float], wall_s: float) -> dict:
    """Count, total, mean, p50 and p99 of a list of durations, and their total's share of `wall_s`."""
    if not seconds:
        return {"count": 0, "total_s": 0.0, "mean_ms": None, "p50_ms": None, "p99_ms": None, "share": 0.0}
    milliseconds = np.asarray(seconds) * 1e3
    total_s = float(np.sum(seconds))
    return {
        "count": len(seconds),
        "total_s": total_s,
        "mean_ms": float(milliseconds.mean()),
        "p50_ms": float(np.percentile(milliseconds, 50)),
        "p99_ms": float(np.percentile(milliseconds, 99)),
        "share": total_s / wall_s if wall_s > 0 else 0.0,
    }
