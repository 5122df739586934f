"""After the last job of a sweep: one table of every job (CSV and markdown) and a plot of throughput vs
block size, one line per batch budget, in the sweep dir and in a summary wandb run of the sweep's group.

A Hydra callback (conf/experiment/sweep.yaml names it), so it runs where the sweep was launched, after
the launcher returns: locally or once all SLURM jobs of a submitit sweep are done."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import wandb
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter
from omegaconf import DictConfig, OmegaConf

from experiments.tracking import wandb_run

BLOCK_SIZE, BATCH_BUDGET = "cache.block_size", "scheduler.max_num_batched_tokens"
THROUGHPUT = "output_tok_per_s"
TABLE_NAME, PLOT_NAME = "summary", "throughput_vs_block_size.png"


def collect_rows(sweep_dir: Path) -> list[dict]:
    """One row per job's `results.json`: its dir, its swept values, its metrics; ordered by the sweep axes."""
    rows = []
    for path in sweep_dir.rglob("results.json"):
        results = json.loads(path.read_text())
        config = OmegaConf.create(results["config"])
        rows.append(
            {
                "job": str(path.parent.relative_to(sweep_dir)),
                "name": results["name"],
                BLOCK_SIZE: OmegaConf.select(config, BLOCK_SIZE),
                BATCH_BUDGET: OmegaConf.select(config, BATCH_BUDGET),
                **results["metrics"],
            }
        )
    return sorted(rows, key=lambda row: (row[BLOCK_SIZE], row[BATCH_BUDGET], row["job"]))


def _columns(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def write_tables(rows: list[dict], sweep_dir: Path) -> None:
    columns = _columns(rows)
    with open(sweep_dir / f"{TABLE_NAME}.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(column)) for column in columns) + " |" for row in rows]
    (sweep_dir / f"{TABLE_NAME}.md").write_text("\n".join(lines) + "\n")


def plot_throughput(rows: list[dict], path: Path) -> None:
    figure = Figure(figsize=(7, 4.5))
    axes = figure.subplots()
    for budget in sorted({row[BATCH_BUDGET] for row in rows}):
        points = sorted((row[BLOCK_SIZE], row[THROUGHPUT]) for row in rows if row[BATCH_BUDGET] == budget)
        block_sizes, throughputs = zip(*points, strict=True)
        axes.plot(block_sizes, throughputs, marker="o", label=str(budget))
    axes.set_xscale("log", base=2)
    axes.set_xticks(sorted({row[BLOCK_SIZE] for row in rows}))
    axes.xaxis.set_major_formatter(ScalarFormatter())
    axes.set_xlabel("cache.block_size (tokens)")
    axes.set_ylabel("output tokens/s")
    axes.set_title("Throughput vs KV block size")
    axes.grid(alpha=0.3)
    axes.legend(title="max_num_batched_tokens")
    figure.savefig(path, dpi=120, bbox_inches="tight")


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = collect_rows(sweep_dir)
        if not rows:
            return
        write_tables(rows, sweep_dir)
        plot_throughput(rows, sweep_dir / PLOT_NAME)
        columns = _columns(rows)
        table = wandb.Table(columns=columns, data=[[row.get(column) for column in columns] for row in rows])
        HydraConfig.instance().set_config(config)  # as for a job: the wandb group may read ${hydra:sweep.dir}
        sweep_config = OmegaConf.masked_copy(config, [key for key in config if key != "hydra"])
        with wandb_run(sweep_config, sweep_dir, "summary", job_type="sweep_summary") as run:
            run.log({TABLE_NAME: table, "throughput_vs_block_size": wandb.Image(str(sweep_dir / PLOT_NAME))})
        print(f"Sweep summary of {len(rows)} jobs: {sweep_dir / TABLE_NAME}.md, {sweep_dir / PLOT_NAME}")
