"""Two runs or two sweeps side by side (`nvllm compare DIR_A DIR_B`): each metric's median and range over
the repeats, B's change against A, and whether the ranges overlap (then the difference is within the
noise the repeats showed); for two runs also the config keys and provenance that differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.harness.repeats import SPREAD_SUFFIXES
from experiments.harness.sweep_results import DONE, JobResult, read_jobs, sort_key, swept_keys

MIN_REPEATS_FOR_SPREAD = 2
NO_SPREAD = "no spread"  # one repeat: min = max = median, so an overlap would say nothing about noise


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _number(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _measured(metrics: dict, metric: str) -> str:
    median, low, high = (metrics.get(metric + suffix) for suffix in ("", *SPREAD_SUFFIXES))
    if median is None:
        return ""
    return _number(median) if low is None else f"{_number(median)} [{_number(low)}, {_number(high)}]"


def _change(a: dict, b: dict, metric: str) -> tuple[str, str]:
    """B's median against A's, and whether B's range overlaps A's (a job of one repeat has no range)."""
    median_a, median_b = a.get(metric), b.get(metric)
    if not isinstance(median_a, int | float) or not isinstance(median_b, int | float) or not median_a:
        return "", ""
    change = f"{(median_b / median_a - 1) * 100:+.1f}%"
    if not all(metric + suffix in values for suffix in SPREAD_SUFFIXES for values in (a, b)):
        return change, ""  # measured once per job (start-up, memory): no range to compare
    if min(a.get("repeats", 1), b.get("repeats", 1)) < MIN_REPEATS_FOR_SPREAD:
        return change, NO_SPREAD
    low_a, high_a = (a[metric + suffix] for suffix in SPREAD_SUFFIXES)
    low_b, high_b = (b[metric + suffix] for suffix in SPREAD_SUFFIXES)
    return change, "yes" if low_b <= high_a and low_a <= high_b else "no"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(row) + " |" for row in rows
    ]


def _source(label: str, directory: Path, jobs: list[JobResult]) -> str:
    provenance = next((job.results.get("provenance", {}) for job in jobs if job.status == DONE), {})
    commit = provenance.get("git_commit")
    code = (
        f"commit {commit[:10]}{' (dirty)' if provenance.get('git_dirty') else ''}" if commit else "no commit"
    )
    return f"{label}: {directory} ({code}, {provenance.get('device_name', 'device unknown')})"


def compare_runs(a: JobResult, b: JobResult) -> list[str]:
    metrics = [
        key
        for key in dict.fromkeys([*a.metrics, *b.metrics])
        if not key.endswith(SPREAD_SUFFIXES) or key.rsplit("_", 1)[0] not in {**a.metrics, **b.metrics}
    ]
    rows = [
        [key, _measured(a.metrics, key), _measured(b.metrics, key), *_change(a.metrics, b.metrics, key)]
        for key in metrics
    ]
    lines = _table(["metric", "A", "B", "B vs A", "ranges overlap"], rows)
    for title, part in (("config", "config"), ("provenance", "provenance")):
        flat_a, flat_b = (_flat((job.results or {}).get(part, {})) for job in (a, b))
        differing = [key for key in dict.fromkeys([*flat_a, *flat_b]) if flat_a.get(key) != flat_b.get(key)]
        if differing:
            lines += ["", f"{title} that differs:", ""]
            lines += _table(
                ["key", "A", "B"], [[key, str(flat_a.get(key)), str(flat_b.get(key))] for key in differing]
            )
    return lines


def compare_sweeps(jobs_a: list[JobResult], jobs_b: list[JobResult], metric: str) -> list[str]:
    keys = list(dict.fromkeys([*swept_keys(jobs_a), *swept_keys(jobs_b)]))

    def by_values(jobs: list[JobResult]) -> dict[tuple, JobResult]:
        return {tuple(job.overrides.get(key) for key in keys): job for job in jobs}

    a, b = by_values(jobs_a), by_values(jobs_b)
    rows = []
    for values in sorted(dict.fromkeys([*a, *b]), key=lambda v: [sort_key(value) for value in v]):
        metrics_a = a[values].metrics if values in a else {}
        metrics_b = b[values].metrics if values in b else {}
        rows.append(
            [
                *map(_number, values),
                _measured(metrics_a, metric),
                _measured(metrics_b, metric),
                *_change(metrics_a, metrics_b, metric),
            ]
        )
    return _table([*keys, f"A {metric}", f"B {metric}", "B vs A", "ranges overlap"], rows)


def compare(dir_a: Path, dir_b: Path, metric: str = "output_tok_per_s") -> str:
    """The comparison as markdown: medians with [min, max] over each job's repeats."""
    jobs_a, jobs_b = read_jobs(Path(dir_a)), read_jobs(Path(dir_b))
    lines = [_source("A", dir_a, jobs_a), _source("B", dir_b, jobs_b), ""]
    single = [
        label
        for label, jobs in (("A", jobs_a), ("B", jobs_b))
        if any(job.metrics.get("repeats", 1) < MIN_REPEATS_FOR_SPREAD for job in jobs if job.status == DONE)
    ]
    if single:
        lines += [
            f"Note: {' and '.join(single)} ran fewer than {MIN_REPEATS_FOR_SPREAD} repeats: the comparison "
            "has no spread, so no difference can be told from noise (set workload.repeats=3).",
            "",
        ]
    if len(jobs_a) == 1 and len(jobs_b) == 1:
        lines += compare_runs(jobs_a[0], jobs_b[0])
    else:
        lines += compare_sweeps(jobs_a, jobs_b, metric)
    return "\n".join(lines + ["", "Values: median [min, max] over the repeats."])
