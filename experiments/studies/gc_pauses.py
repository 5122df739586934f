"""Python's full garbage collections inside `generate`: how many, when, how long. A full collection walks
every container object the process holds (a compiled model leaves hundreds of thousands) while the engine's
loop waits, in whichever host stage it lands: a profile whose stage has a p99 far above its p50 may show one.
`python -m experiments.studies.gc_pauses [OVERRIDE ...]` runs `python -m nvllm.run OVERRIDE ...` and lists
them."""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from nvllm import run
from nvllm.llm import LLM


@dataclass(frozen=True)
class FullCollection:
    generate_call: int  # 1 for the first `generate` while watched
    start_s: float  # seconds into that call
    duration_ms: float


@contextmanager
def full_collections() -> Iterator[list[FullCollection]]:
    """A list that gets each full collection that runs inside an `LLM.generate` call while the block
    runs."""
    found: list[FullCollection] = []
    calls: list[float] = []  # each call's start
    inside = [False]
    started = [0.0]

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2 and inside[0]:
            duration_ms = (time.perf_counter() - started[0]) * 1e3
            found.append(FullCollection(len(calls), started[0] - calls[-1], duration_ms))

    original = LLM.generate

    @functools.wraps(original)
    def generate(self, *args, **kwargs):
        calls.append(time.perf_counter())
        inside[0] = True
        try:
            return original(self, *args, **kwargs)
        finally:
            inside[0] = False

    LLM.generate = generate
    gc.callbacks.append(watch)
    try:
        yield found
    finally:
        gc.callbacks.remove(watch)
        LLM.generate = original


def main() -> None:
    with full_collections() as found:
        try:
            run.main()  # Hydra reads the overrides from the command line
        except SystemExit:  # Hydra's exit after a job: the collections are still reported
            pass
    num_objects = len(gc.get_objects())
    print(f"{len(found)} full garbage collections inside generate calls; objects tracked now: {num_objects}")
    for collection in found:
        print(
            f"  generate call {collection.generate_call}, {collection.start_s:.3f} s in: "
            f"{collection.duration_ms:.1f} ms"
        )


if __name__ == "__main__":
    main()
