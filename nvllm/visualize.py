"""`python -m nvllm.visualize RUN_DIR`: the figures of a profiled run, from the timelines it wrote.

Reads `steps.csv`, `requests.csv` and `profile.json` (see `nvllm.profiling`) and renders into
`RUN_DIR/figures/`: the batch of each step over time, KV-cache use with the preemptions, every request's
lifecycle, and the stage breakdown. With `--follow`, draws them again as a running run's files grow, until
the run ends (nvllm/profiling/follow.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from nvllm.profiling.follow import DEFAULT_INTERVAL_S, follow
from nvllm.profiling.report import DEVICE_NAMES
from nvllm.profiling.timeline import END_MARKER, RUN_FILES, read_run_dir

FIGURES_DIR = "figures"
FIGURE_NAMES = ("batch_size.png", "kv_cache.png", "request_lifecycles.png", "stages.png")
DPI, WIDTH_IN = 100, 12.0
KIND_COLORS = {"prefill": "tab:orange", "decode": "tab:blue"}
STATE_COLORS = {"waiting": "0.8", "prefill": "tab:orange", "decode": "tab:blue"}


def lifecycle_height_in(num_requests: int) -> float:
    """One row per request, thin enough that a few hundred fit on a screen, thick enough to see each."""
    return min(max(4.0, 1.5 + 0.04 * num_requests), 80.0)


def _figure(height_in: float, rows: int = 1) -> tuple[Figure, list]:
    figure = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return figure, list(axes)


def plot_batches(steps: list[dict], path: Path) -> None:
    """(a) sequences and tokens of each step over time, prefill and decode told apart."""
    figure, (seqs_axes, tokens_axes) = _figure(7.0, rows=2)
    for kind, color in KIND_COLORS.items():
        rows = [step for step in steps if step["kind"] == kind]
        if not rows:
            continue
        starts, ends = [row["start_s"] for row in rows], [row["end_s"] for row in rows]
        for axes, key in ((seqs_axes, "num_seqs"), (tokens_axes, "num_tokens")):
            values = [row[key] for row in rows]
            axes.hlines(values, starts, ends, colors=color, linewidth=2)
            axes.scatter(ends, values, s=6, color=color, label=f"{kind} ({len(rows)} steps)")
    seqs_axes.set_ylabel("batch size (sequences)")
    tokens_axes.set_ylabel("tokens per step")
    tokens_axes.set_xlabel("time since start (s)")
    seqs_axes.set_title("Batch of each engine step (a decode step is a round of several model steps)")
    for axes in (seqs_axes, tokens_axes):
        axes.grid(alpha=0.3)
        axes.set_ylim(bottom=0)
    seqs_axes.legend(loc="upper right")
    figure.savefig(path)


def plot_kv_cache(steps: list[dict], path: Path) -> None:
    """(b) KV blocks in use over time with the preemptions marked; running and waiting sequences."""
    figure, (kv_axes, queue_axes) = _figure(7.0, rows=2)
    ends = [step["end_s"] for step in steps]
    used = [step["kv_blocks_used"] for step in steps]
    capacity = steps[0]["kv_blocks_used"] + steps[0]["kv_blocks_free"] if steps else 0
    kv_axes.step(ends, used, where="post", color="tab:green", label="blocks in use")
    kv_axes.axhline(
        capacity, color="black", linestyle="--", linewidth=1, label=f"capacity ({capacity} blocks)"
    )
    preempted = [
        (step["end_s"], step["kv_blocks_used"], step["num_preemptions"])
        for step in steps
        if step["num_preemptions"]
    ]
    if preempted:
        times, levels, counts = zip(*preempted)
        kv_axes.scatter(
            times, levels, marker="x", color="tab:red", s=30, zorder=3, label=f"preemptions ({sum(counts)})"
        )
    kv_axes.set_ylabel("KV-cache blocks")
    kv_axes.set_ylim(0, max(capacity, 1) * 1.05)
    kv_axes.set_title("KV-cache use")
    kv_axes.legend(loc="upper right")
    queue_axes.step(ends, [step["num_running"] for step in steps], where="post", label="running")
    queue_axes.step(ends, [step["num_waiting"] for step in steps], where="post", label="waiting")
    queue_axes.set_ylabel("sequences")
    queue_axes.set_xlabel("time since start (s)")
    queue_axes.legend(loc="upper right")
    for axes in (kv_axes, queue_axes):
        axes.grid(alpha=0.3)
    figure.savefig(path)


def lifecycle_segments(request: dict, end_of_run: float) -> list[tuple[str, float, float]]:
    """(state, start, end) of a request: waiting until each admission, its prompt's prefill (or chunks)
    until its first token of that admission, then decode until it is preempted or finishes."""
    finish = request["finish_s"] if request["finish_s"] is not None else end_of_run
    if request["first_scheduled_s"] is None:
        return [("waiting", request["arrival_s"], finish)]
    admissions = [request["first_scheduled_s"], *request["resumed_s"]]
    preemptions = request["preempted_s"]
    segments, waiting_since = [], request["arrival_s"]
    for index, admitted in enumerate(admissions):
        segments.append(("waiting", waiting_since, admitted))
        leaves = preemptions[index] if index < len(preemptions) else finish
        prefilled = next((t for t in request["prefill_done_s"] if admitted <= t <= leaves), leaves)
        segments += [("prefill", admitted, prefilled), ("decode", prefilled, leaves)]
        waiting_since = leaves
    if len(preemptions) == len(admissions):  # preempted, not admitted again
        segments.append(("waiting", preemptions[-1], finish))
    return [segment for segment in segments if segment[2] > segment[1]]


def plot_lifecycles(requests: list[dict], steps: list[dict], path: Path) -> None:
    """(c) one row per request, in arrival order: waiting, prefill, decode; preemptions marked."""
    figure, (axes,) = _figure(lifecycle_height_in(len(requests)))
    ordered = sorted(requests, key=lambda request: (request["arrival_s"], request["request"]))
    end_of_run = max([step["end_s"] for step in steps], default=0.0)
    bars: dict[str, tuple[list, list, list]] = {state: ([], [], []) for state in STATE_COLORS}
    preempted_rows, preempted_times = [], []
    for row, request in enumerate(ordered):
        for state, start, end in lifecycle_segments(request, end_of_run):
            bars[state][0].append(row)
            bars[state][1].append(start)
            bars[state][2].append(end - start)
        preempted_rows += [row] * len(request["preempted_s"])
        preempted_times += request["preempted_s"]
    for state, (rows, lefts, widths) in bars.items():
        axes.barh(rows, widths, left=lefts, height=0.8, color=STATE_COLORS[state], linewidth=0)
    handles = [Patch(color=color, label=state) for state, color in STATE_COLORS.items()]
    if preempted_times:
        handles.append(
            axes.scatter(
                preempted_times,
                preempted_rows,
                marker="x",
                color="tab:red",
                s=12,
                zorder=3,
                label=f"preempted ({len(preempted_times)})",
            )
        )
    axes.set_ylim(len(ordered) - 0.5, -0.5)  # the first arrival on top
    axes.set_xlabel("time since start (s)")
    axes.set_ylabel("request (in arrival order)")
    axes.set_title(f"Request lifecycles ({len(ordered)} requests)")
    axes.legend(handles=handles, loc="upper right")
    axes.grid(axis="x", alpha=0.3)
    figure.savefig(path)


def plot_stages(profile: dict, path: Path) -> None:
    """(d) host time per stage and device time per batch kind, with their shares of the wall time."""
    figure, (host_axes, device_axes) = _figure(6.0, rows=2)
    for axes, items, title in (
        (host_axes, [(f"{name}", stats) for name, stats in profile["stages"].items()], "host stages"),
        (device_axes, [(DEVICE_NAMES[kind], stats) for kind, stats in profile["device"].items()], "device"),
    ):
        names = [name for name, _ in items]
        totals = np.array([stats["total_s"] for _, stats in items])
        axes.barh(names, totals, color="tab:purple" if axes is host_axes else "tab:cyan")
        for y, (_, stats) in enumerate(items):
            axes.annotate(
                f" {stats['share']:.1%} ({stats['count']}x)", (stats["total_s"], y), va="center", fontsize=8
            )
        axes.invert_yaxis()
        axes.set_xlim(0, max(totals.max(initial=0.0), 1e-9) * 1.15)  # room for the labels
        axes.set_ylabel(title)
        axes.grid(axis="x", alpha=0.3)
    host_axes.set_title(f"Where the time goes ({profile['wall_s']:.2f} s profiled; shares of it)")
    device_axes.set_xlabel("total time (s)")
    figure.savefig(path)


def render(run_dir: str | Path) -> list[Path]:
    """The four figures of `run_dir`'s timelines, in `run_dir/figures/`; returns their paths."""
    return draw(run_dir, *read_run_dir(Path(run_dir)))


def draw(
    run_dir: str | Path, steps: list[dict], requests: list[dict] | None, profile: dict | None
) -> list[Path]:
    """The figures that the data allow into `run_dir/figures/` (a run still going has no requests or profile
    yet: no lifecycles or stages); returns their paths."""
    figures = Path(run_dir) / FIGURES_DIR
    figures.mkdir(exist_ok=True)
    paths = [figures / name for name in FIGURE_NAMES]
    plot_batches(steps, paths[0])
    plot_kv_cache(steps, paths[1])
    if requests is not None:
        plot_lifecycles(requests, steps, paths[2])
    if profile is not None:
        plot_stages(profile, paths[3])
    return [path for path, data in zip(paths, (steps, steps, requests, profile)) if data is not None]


def follow_run(run_dir: Path, interval_s: float) -> int:
    """`--follow`: the figures drawn again as the run's files grow, until the run ends; returns the draws."""
    print(f"following {run_dir} every {interval_s:g} s until {END_MARKER} appears", flush=True)

    def redraw(steps: list[dict], requests: list[dict] | None, profile: dict | None) -> None:
        paths = draw(run_dir, steps, requests, profile)
        print(f"{len(steps)} steps: drew {', '.join(path.name for path in paths)}", flush=True)

    return follow(run_dir, redraw, interval_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nvllm.visualize", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help=f"a profiled run's dir (holding {', '.join(RUN_FILES)})")
    parser.add_argument(
        "--follow",
        action="store_true",
        help=f"draw again as a running run's files grow (profile.live=true), until it writes {END_MARKER}",
    )
    parser.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between checks with --follow"
    )
    args = parser.parse_args(argv)
    if args.follow:
        follow_run(args.run_dir, args.interval)
        return
    missing = [name for name in RUN_FILES if not (args.run_dir / name).is_file()]
    if missing:
        parser.error(
            f"{args.run_dir} has no {', '.join(missing)}: profile a run first (profile.enabled=true)"
        )
    for path in render(args.run_dir):
        print(path)


if __name__ == "__main__":
    main()
