"""Where a job's results go: `results.json` in its output dir, and one wandb run (offline by default)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import wandb
from omegaconf import DictConfig

RESULTS_FILE = "results.json"


def _report_line(run: wandb.Run) -> str | None:
    """What a quiet run prints once it is finished: where it is, and how to upload it."""
    if run.settings.mode == "online":
        return f"wandb: {run.url}"
    if run.settings.mode == "offline":
        return f"wandb: offline run, upload with `wandb sync {run.settings.sync_dir}`"
    return None


@contextmanager
def wandb_run(
    settings: DictConfig, run_dir: Path, name: str | None, job_type: str, config: dict
) -> Iterator[wandb.Run]:
    """One wandb run holding `config`; finished even when the job fails, so that the next job of a sweep
    (same process) starts its own run. Quiet (`wandb.quiet`): wandb prints nothing, and one line says
    where the run is once it is finished."""
    run_dir = Path(settings.dir or run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=settings.project,
        group=settings.group,
        name=name,
        job_type=job_type,
        config=config,
        dir=run_dir,
        mode=settings.mode,
        # Hydra already logs the job's output to its dir; the provenance holds nvllm's own commit (wandb's
        # git capture would hold the working directory's repository, if any)
        settings=wandb.Settings(console="off", silent=settings.quiet, disable_git=True),
    )
    exit_code = 1
    try:
        yield run
        exit_code = 0
    finally:
        run.finish(exit_code=exit_code)
        if settings.quiet and (line := _report_line(run)):
            print(line)


def forget_results(output_dir: Path) -> None:
    """Remove a results.json left in the job's dir by an earlier run (a sweep re-run into the same
    `hydra.sweep.dir`): a job that fails this time must not be read back as done with the old numbers."""
    (Path(output_dir) / RESULTS_FILE).unlink(missing_ok=True)


def _numbers(values: dict) -> dict:
    return {key: value for key, value in values.items() if value is not None}


def record(run: wandb.Run, output_dir: Path, results: dict) -> None:
    """`results` (name, config, provenance, `metrics` and the `repeats`' own) into `results.json` and into
    wandb: each repeat as a step of the run's history, the metrics as its summary and as a one-row table
    that the wandb UI concatenates across a group."""
    (output_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n")
    for repeat, values in enumerate(results["repeats"]):
        run.log({"repeat": repeat, **_numbers(values)})
    metrics = results["metrics"]
    run.summary.update(_numbers(metrics))
    row = {"name": results["name"], **metrics}
    run.log({"results": wandb.Table(columns=list(row), data=[list(row.values())])})
