"""The GPU kernels of a torch.profiler trace (`profile.torch_trace_steps`), summed by name: how many ran,
their device time, the device's idle time before each launch, the span each adds, and how busy the device
was between the first kernel and the last one (the rest is idle gaps: launch latency, host waits). A gap is
charged to the kernel after it, whose launch the device waited for.

Under programmatic dependent launch a kernel starts before the one ahead of it ends and waits there, so its
device time counts that wait too. The span it adds, how far its end moves the latest end of the kernels
before it, does not: the added spans and the gaps sum to the whole span, and rank the kernels by what they
cost the step.

    python -m experiments.studies.trace_kernels RUN_DIR/trace.json [--top 25]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path


def short_name(name: str) -> str:
    """A kernel's name without template arguments and parameter lists, at most 90 characters."""
    name = re.sub(r"<.*>", "<…>", name)
    name = re.sub(r"\(.*\)", "", name)
    return name[:90]


def kernel_events(trace: dict) -> list[dict]:
    return [event for event in trace["traceEvents"] if event.get("cat") == "kernel" and "dur" in event]


def idle_before(kernels: list[dict]) -> list[float]:
    """For each kernel (in start order), how long the device ran no kernel right before it started (µs;
    the first kernel's is 0)."""
    gaps, last_end = [], kernels[0]["ts"] if kernels else 0.0
    for event in kernels:
        gaps.append(max(0.0, event["ts"] - last_end))
        last_end = max(last_end, event["ts"] + event["dur"])
    return gaps


def span_added(kernels: list[dict]) -> list[float]:
    """For each kernel (in start order), how far its end moves the latest end of the kernels before it (µs;
    0 for a kernel that ends inside another's run)."""
    added, last_end = [], kernels[0]["ts"] if kernels else 0.0
    for event in kernels:
        end = event["ts"] + event["dur"]
        added.append(max(0.0, end - max(event["ts"], last_end)))
        last_end = max(last_end, end)
    return added


def summary(trace_path: Path, top: int) -> str:
    kernels = sorted(kernel_events(json.loads(Path(trace_path).read_text())), key=lambda event: event["ts"])
    if not kernels:
        return f"{trace_path}: no GPU kernels recorded"
    by_name: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for event, gap, added in zip(kernels, idle_before(kernels), span_added(kernels)):
        by_name[short_name(event["name"])].append((event["dur"], gap, added))
    busy_us = sum(event["dur"] for event in kernels)
    span_us = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    lines = [
        f"{len(kernels)} kernels, {busy_us / 1e3:.2f} ms on the device over a span of {span_us / 1e3:.2f} ms "
        f"({busy_us / span_us:.0%} busy)",
        f"{'count':>7} {'total ms':>9} {'mean us':>8} {'idle us':>8} {'adds us':>8} {'share':>6} "
        f"{'of span':>7}  kernel",
    ]
    ranked = sorted(by_name.items(), key=lambda item: -sum(added for _, _, added in item[1]))
    for name, launches in ranked[:top]:
        count = len(launches)
        total, idle, added = (sum(values) for values in zip(*launches))
        times = f"{total / 1e3:>9.2f} {total / count:>8.1f} {idle / count:>8.1f} {added / count:>8.1f}"
        lines.append(f"{count:>7} {times} {total / busy_us:>6.1%} {added / span_us:>7.1%}  {name}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=25)
    arguments = parser.parse_args()
    print(summary(arguments.trace, arguments.top))


if __name__ == "__main__":
    main()
