"""The measured part of an experiment, run `repeats` times on fresh requests after one warm-up, and the
spread of each measurement over the repeats: median, min and max."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real

from experiments.harness.engine import warm_up
from nvllm import LLM

SPREAD_SUFFIXES = ("_min", "_max")  # beside each measurement's median, under the measurement's own name


@dataclass(frozen=True)
class Repeated:
    per_repeat: list[dict]  # the measurements of each repeat, in order
    spread: dict  # each measurement's median (its own name), min and max (`name_min`, `name_max`)


def median_min_max(per_repeat: list[dict]) -> dict:
    """Each numeric measurement's median, min and max over the repeats; None where a repeat has none."""
    spread = {}
    for key in per_repeat[0]:
        values = [values[key] for values in per_repeat]
        numeric = all(isinstance(value, Real) and not isinstance(value, bool) for value in values)
        median, low, high = (statistics.median(values), min(values), max(values)) if numeric else (None,) * 3
        spread |= {key: median, f"{key}_min": low, f"{key}_max": high}
    return spread


def measure_repeats(llm: LLM, repeats: int, measure: Callable[[int], dict]) -> Repeated:
    """`measure(repeat)` for repeat 0..repeats-1 after one warm-up of the engine. `measure` draws its own
    requests for the repeat (`make_requests(workload, vocab, repeat)`): fresh ones each time, so that the
    prefix cache never turns a repeat into a replay of the one before. Ctrl-C after the first repeat ends the
    loop: the repeats finished are what is measured (their number is the results' `repeats`)."""
    warm_up(llm)
    per_repeat = []
    for repeat in range(repeats):
        try:
            per_repeat.append(measure(repeat))
        except KeyboardInterrupt:
            if not per_repeat:
                raise
            print(f"Interrupted (Ctrl-C) in repeat {repeat + 1}/{repeats}: recording the {repeat} finished")
            break
        if repeats > 1 and "output_tok_per_s" in per_repeat[-1]:
            print(f"Repeat {repeat + 1}/{repeats}: {per_repeat[-1]['output_tok_per_s']:.1f} output tok/s")
    return Repeated(per_repeat, median_min_max(per_repeat))
