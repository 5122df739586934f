"""Where a run's time went over its course, from its step timeline (`Profiler.steps()`, `steps.csv`).

A batch run has phases of different speed: the prompts' prefill (compute-bound), decode at the full batch,
decode while the batch shrinks, and the draining tail, where a few long sequences are left and every step
still reads all the weights. Decode rounds fall into a phase by their batch against the largest decode
batch of the run: at least 3/4 of it (full), at least 1/4 (shrinking), less (tail).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from nvllm.profiling.report import format_table

# a step's times come from time.perf_counter: a phase no longer than a tick of it has no measurable rate
TIMER_RESOLUTION_S = time.get_clock_info("perf_counter").resolution
PHASES = ("prefill", "decode, full batch", "decode, shrinking", "decode, draining tail")


@dataclass
class Phase:
    name: str
    steps: int = 0  # engine steps: prefill steps or decode rounds
    wall_s: float = 0.0
    tokens: int = 0  # prefill: prompt tokens computed; decode: tokens generated
    device_s: float = 0.0


def phase_of(step: dict, largest_decode_batch: int) -> str:
    if step["kind"] == "prefill":
        return PHASES[0]
    if 4 * step["num_seqs"] >= 3 * largest_decode_batch:
        return PHASES[1]
    if 4 * step["num_seqs"] >= largest_decode_batch:
        return PHASES[2]
    return PHASES[3]


def run_phases(steps: list[dict]) -> list[Phase]:
    """The steps' wall time, tokens and device time summed by phase (the phases with steps, in order)."""
    largest = max((step["num_seqs"] for step in steps if step["kind"] == "decode"), default=0)
    phases = {name: Phase(name) for name in PHASES}
    for step in steps:
        phase = phases[phase_of(step, largest)]
        phase.steps += 1
        phase.wall_s += step["end_s"] - step["start_s"]
        phase.tokens += step["num_tokens"]
        phase.device_s += (step["device_ms"] or 0.0) / 1e3
    return [phase for phase in phases.values() if phase.steps]


def _seconds(seconds: float) -> str:
    """Milliseconds and above to the millisecond; a shorter phase to 3 significant digits, so that its rate
    can be checked against what is printed (a phase of 0.3 ms is no phase of "0.000 s")."""
    return f"{seconds:.3f}" if seconds >= 1e-3 or seconds == 0 else f"{seconds:.3g}"


def format_phases(steps: list[dict]) -> str:
    """`run_phases` as a table: each phase's steps, wall time and its share of the steps' time, tokens,
    tokens a second, and device time (a decode round's device time can run past its wall time, where the
    next round is launched before this one's tokens reach the host)."""
    phases = run_phases(steps)
    if not phases:
        return "No steps recorded."
    total_s = sum(phase.wall_s for phase in phases)
    header = ("phase", "steps", "wall s", "share", "tokens", "tok/s", "device s")
    rows = [header] + [
        (
            phase.name,
            str(phase.steps),
            _seconds(phase.wall_s),
            f"{phase.wall_s / total_s:.1%}" if total_s else "-",
            str(phase.tokens),
            f"{phase.tokens / phase.wall_s:,.0f}" if phase.wall_s > TIMER_RESOLUTION_S else "-",
            f"{phase.device_s:.3f}",
        )
        for phase in phases
    ]
    title = "Phases of the run (decode rounds by batch, against the largest):"
    return "\n".join([title, *format_table(rows)])
