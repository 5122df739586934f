"""What the scheduler did to a request, as records: the engine drains them after each call and hands them to
whoever watches (the profiler's request timelines, the sampler's per-request state), so that the scheduler
knows none of them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from nvllm.scheduler.sequence import Sequence


class EventKind(Enum):
    SCHEDULED = auto()  # admitted: its blocks allocated and its prefix-cache hits known, first or again
    PREEMPTED = auto()  # its KV dropped; it waits to be recomputed
    RELEASED = auto()  # out of the running ones (preempted, finished, aborted): its device state is gone


@dataclass(frozen=True)
class SchedulerEvent:
    kind: EventKind
    seq: Sequence
