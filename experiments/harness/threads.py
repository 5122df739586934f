"""torch's intra-op threads for a job: on the CPU, one per available core unless the user chose."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from experiments.harness.provenance import available_cores


def thread_choice(requested: int | None, device: str) -> tuple[int | None, str]:
    """The thread count to set (None: leave torch's) and where it comes from. torch's own default on the
    CPU is the host's physical cores, which a container or a CPU affinity mask may not give this process:
    its threads then spin against each other."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"cpu_threads={requested} must be positive (or null: the available cores)")
        return requested, "cpu_threads"
    if os.environ.get("OMP_NUM_THREADS"):
        return None, "OMP_NUM_THREADS"
    if device == "cpu":
        return available_cores(), "available cores"
    return None, "torch default"


@contextmanager
def cpu_threads(requested: int | None, device: str) -> Iterator[str]:
    """Sets the threads for the block (restored after it: a sweep's jobs and a test suite share one
    process), says what it used, and yields where the number came from."""
    count, source = thread_choice(requested, device)
    previous = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    print(f"CPU threads: {torch.get_num_threads()} ({source}; `cpu_threads=N` or $OMP_NUM_THREADS sets them)")
    try:
        yield source
    finally:
        torch.set_num_threads(previous)
