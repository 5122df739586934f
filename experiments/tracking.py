"""Where a job's results go: `results.json` in its output dir, and one wandb run (offline by default)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import wandb
from omegaconf import DictConfig, OmegaConf


@contextmanager
def wandb_run(cfg: DictConfig, output_dir: Path, name: str | None, job_type: str) -> Iterator[wandb.Run]:
    """One wandb run holding the whole resolved config; finished even when the job fails, so that the
    next job of a sweep (same process) starts its own run."""
    settings = cfg.wandb
    run_dir = Path(settings.dir or output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=settings.project,
        group=settings.group,
        name=name,
        job_type=job_type,
        config=OmegaConf.to_container(cfg, resolve=True),
        dir=run_dir,
        mode=settings.mode,
        settings=wandb.Settings(console="off"),  # Hydra already logs the job's output to its dir
    )
    exit_code = 1
    try:
        yield run
        exit_code = 0
    finally:
        run.finish(exit_code=exit_code)


def record(run: wandb.Run, cfg: DictConfig, output_dir: Path, name: str | None, metrics: dict) -> None:
    """The metrics into `results.json` (with the config, for the sweep summary) and into wandb: as
    history/summary values, and as a one-row table that the wandb UI concatenates across a group."""
    results = {"name": name, "config": OmegaConf.to_container(cfg, resolve=True), "metrics": metrics}
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    row = {"name": name, **metrics}
    table = wandb.Table(columns=list(row), data=[list(row.values())])
    run.log({**{key: value for key, value in metrics.items() if value is not None}, "results": table})
