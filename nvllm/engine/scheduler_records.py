"""What the scheduler did to requests, handed on after each of its calls: admissions and preemptions to the
profiler's request timelines; a sequence that stopped running gives back its device token history."""

from __future__ import annotations

from nvllm.profiling.profiler import NullProfiler, Profiler
from nvllm.sampling.bad_words import release_bad_words_history
from nvllm.sampling.request_processing import release_penalty_history
from nvllm.scheduler.events import EventKind
from nvllm.scheduler.scheduler import Scheduler


def hand_on_scheduler_events(scheduler: Scheduler, profiler: Profiler | NullProfiler) -> None:
    for event in scheduler.take_events():
        if event.kind is EventKind.SCHEDULED:
            profiler.request_scheduled(event.seq)
        elif event.kind is EventKind.PREEMPTED:
            profiler.request_preempted(event.seq)
        else:
            release_penalty_history(event.seq)
            release_bad_words_history(event.seq)
