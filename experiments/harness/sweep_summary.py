"""A sweep's summary: one table of every job (CSV with every metric, markdown with the chosen one) and a
plot of the chosen metric by the swept keys, with each job's spread over its repeats, in the sweep dir;
after the last job, also a summary wandb run in the sweep's group.

`summarize(sweep_dir)` builds it from what the dir holds, so it works for any sweep, complete or not
(`nvllm summarize SWEEP_DIR`); the `SweepSummary` Hydra callback (conf/config.yaml) rebuilds it after every
job of a multirun, so an interrupted sweep still has one, and logs the wandb run once the sweep is done."""

from __future__ import annotations

import csv
import dataclasses
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wandb
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from matplotlib.figure import Figure
from omegaconf import DictConfig, OmegaConf

from experiments.harness.config import SummaryConfig
from experiments.harness.sweep_results import (
    DONE,
    JobResult,
    read_jobs,
    read_multirun,
    sort_key,
    swept_keys,
    typed,
)
from experiments.harness.tracking import wandb_run

TABLE_NAME = "summary"  # summary.csv, summary.md and summary.png: the sweep's own summary settings


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """`write(temporary path)`, then the file replaces `path` at once: jobs of a cluster sweep may rebuild
    the summary at the same time."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(handle)
    try:
        write(temporary)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp's 0600 would hide the summary from the group
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def table_rows(jobs: list[JobResult], keys: list[str]) -> list[dict]:
    """One row per job, ordered by the swept keys: its number, status, swept values and every metric."""
    rows = [
        {"job": job.job, "status": job.status, **{key: job.overrides.get(key) for key in keys}, **job.metrics}
        for job in jobs
    ]
    return sorted(rows, key=lambda row: ([sort_key(row[key]) for key in keys], sort_key(typed(row["job"]))))


def write_tables(rows: list[dict], keys: list[str], metric: str, sweep_dir: Path, stem: str) -> str:
    """The CSV and markdown tables as `stem`.csv and `stem`.md; the markdown table, returned."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with_status = ["job", "status", *keys]
    shown = [*with_status, metric, f"{metric}_min", f"{metric}_max", "repeats"]

    def write_csv(path: str) -> None:
        with open(path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)

    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    # the swept values as the command line spelled them, the metric rounded
    lines += [
        "| "
        + " | ".join(
            str(row[column]) if column in with_status else _cell(row.get(column)) for column in shown
        )
        + " |"
        for row in rows
    ]
    markdown = "\n".join(lines) + "\n"
    _atomic_write(sweep_dir / f"{stem}.csv", write_csv)
    _atomic_write(sweep_dir / f"{stem}.md", lambda path: Path(path).write_text(markdown))
    return markdown


def plot(rows: list[dict], keys: list[str], summary: SummaryConfig, path: Path) -> None:
    """The metric's median per job (points) and its min to max over the job's repeats (bars), by
    `summary.x` (evenly spaced, in order), one line per value of the other swept keys."""
    metric = summary.metric
    x_key = summary.x or (keys[0] if keys else "job")
    hue_keys = [summary.hue] if summary.hue else []
    hue_keys += [key for key in keys if key not in (x_key, *hue_keys)]
    done = [row for row in rows if row["status"] == DONE and row.get(metric) is not None]
    x_values = sorted({row[x_key] for row in rows}, key=sort_key)
    lines = sorted(
        {tuple(row[key] for key in hue_keys) for row in done}, key=lambda v: list(map(sort_key, v))
    )
    figure = Figure(figsize=(7.5, 4.8))
    axes = figure.subplots()
    width = 0.2 / max(len(lines), 1)
    for index, line in enumerate(lines):
        points = sorted(
            # a metric measured once per job (start-up, memory) has no range
            (
                x_values.index(row[x_key]),
                row[metric],
                row.get(f"{metric}_min", row[metric]),
                row.get(f"{metric}_max", row[metric]),
            )
            for row in done
            if tuple(row[key] for key in hue_keys) == line
        )
        positions, medians, lows, highs = zip(*points, strict=True)
        offset = (index - (len(lines) - 1) / 2) * width  # side by side, so that the bars do not overlap
        label = ", ".join(f"{key}={value}" for key, value in zip(hue_keys, line, strict=True)) or None
        axes.errorbar(
            [position + offset for position in positions],
            medians,
            yerr=[[m - low for m, low in zip(medians, lows)], [high - m for m, high in zip(medians, highs)]],
            marker="o",
            capsize=4,
            label=label,
        )
    axes.set_xticks(range(len(x_values)), [str(value) for value in x_values])
    axes.set_xlim(-0.5, len(x_values) - 0.5)
    axes.set_xlabel(x_key)
    axes.set_ylabel(metric)
    if summary.y_from_zero:
        axes.set_ylim(bottom=0)
    repeats = sorted({row.get("repeats") for row in done if row.get("repeats") is not None})
    missing = len(rows) - len(done)
    shown = (
        f"median of {'/'.join(map(str, repeats))} repeats, bars min to max"
        if any(f"{metric}_min" in row for row in done)
        else "one value per job"
    )
    axes.set_title(
        f"{metric} by {x_key}: {shown}"
        + (f"\n{missing} of {len(rows)} jobs without results" if missing else ""),
        fontsize=10,
    )
    axes.grid(alpha=0.3)
    if any(line for line in lines):
        axes.legend(fontsize=8)
    _atomic_write(
        path, lambda temporary: figure.savefig(temporary, dpi=120, bbox_inches="tight", format="png")
    )


def sweep_description(jobs: list[JobResult], keys: list[str], sweep_dir: Path) -> dict:
    """What the sweep varied and held fixed, as the summary wandb run's config."""
    fixed = {key: value for key, value in jobs[0].overrides.items() if key not in keys}
    varied = {key: sorted({job.overrides.get(key) for job in jobs}, key=sort_key) for key in keys}
    return {
        "sweep_dir": str(sweep_dir),
        "varied": varied,
        "fixed": fixed,
        "jobs": len(jobs),
        "jobs_done": sum(job.status == DONE for job in jobs),
    }


def summary_config(sweep_dir: Path, **overrides: Any) -> SummaryConfig:
    """The sweep's own `summary` settings (from its multirun.yaml), with `overrides` over them."""
    multirun = read_multirun(sweep_dir)
    stored = (
        OmegaConf.to_container(multirun.summary) if multirun is not None and "summary" in multirun else {}
    )
    return SummaryConfig(
        **{**stored, **{key: value for key, value in overrides.items() if value is not None}}
    )


def summary_stem(summary: SummaryConfig, saved: SummaryConfig) -> str:
    """The files' name: the sweep's own summary keeps `summary`; another view (`--metric`, `--x`...) gets a
    name of its own, so that asking for it never overwrites the summary the sweep saved."""
    if summary == saved:
        return TABLE_NAME
    differing = [
        f"{key}-{value}" for key, value in dataclasses.asdict(summary).items() if getattr(saved, key) != value
    ]
    return "-".join([TABLE_NAME, *differing]).replace("/", "_")


def summarize(sweep_dir: Path, summary: SummaryConfig | None = None, log_wandb: bool = False) -> str:
    """Tables and plot of the sweep in `sweep_dir` (and its summary wandb run); the markdown table and a
    line saying where the files are."""
    sweep_dir = Path(sweep_dir)
    saved = summary_config(sweep_dir)
    summary = summary or saved
    stem = summary_stem(summary, saved)
    jobs = read_jobs(sweep_dir)
    keys = swept_keys(jobs)
    for key in (summary.x, summary.hue):
        if key is not None and key not in keys:
            raise ValueError(f"summary x/hue {key!r} is not a key the sweep varies: {keys}")
    measured = {key for job in jobs for key in job.metrics}
    if measured and summary.metric not in measured:
        raise ValueError(f"summary.metric={summary.metric!r} is in no job's results: {sorted(measured)}")
    rows = table_rows(jobs, keys)
    table = write_tables(rows, keys, summary.metric, sweep_dir, stem)
    plot(rows, keys, summary, sweep_dir / f"{stem}.png")
    if log_wandb:
        description = sweep_description(jobs, keys, sweep_dir)
        log_summary_run(sweep_dir, jobs, rows, {**description, "summary": dataclasses.asdict(summary)}, stem)
    done = sum(job.status == DONE for job in jobs)
    return (
        f"{table}\nSweep summary of {done}/{len(jobs)} jobs (varied: {', '.join(keys) or 'nothing'}): "
        f"{sweep_dir / stem}.md, {sweep_dir / stem}.csv, {sweep_dir / stem}.png"
    )


def log_summary_run(
    sweep_dir: Path, jobs: list[JobResult], rows: list[dict], config: dict, stem: str = TABLE_NAME
) -> None:
    """The summary wandb run, with the wandb settings its jobs ran with (their group: the sweep's)."""
    done = [job for job in jobs if job.status == DONE]
    if not done:
        return
    settings = OmegaConf.create(done[0].results["config"]["wandb"])
    columns = list(dict.fromkeys(key for row in rows for key in row))
    table = wandb.Table(columns=columns, data=[[row.get(column) for column in columns] for row in rows])
    with wandb_run(settings, sweep_dir, "summary", "sweep_summary", config) as run:
        run.log({TABLE_NAME: table, "plot": wandb.Image(str(sweep_dir / f"{stem}.png"))})


class SweepSummary(Callback):
    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:
            summarize(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        print(summarize(Path(config.hydra.sweep.dir), log_wandb=True))
