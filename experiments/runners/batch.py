"""Batch inference over a dataset: `nvllm run +experiment=batch batch.input=PATH batch.output=DIR
[batch.replicas=N]`. The rows go through `nvllm.batch.run_batch` (Ray Data replicas, or one engine in this
process); what the run did (rows written and skipped, rows/s, tokens/s) goes to results.json and wandb."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from experiments.harness.batch_config import sampling_params
from experiments.harness.config import engine_config_from_run_config
from experiments.harness.provenance import provenance
from experiments.harness.threads import cpu_threads
from experiments.harness.tracking import record, wandb_run
from nvllm.batch import BatchSummary, run_batch
from nvllm.engine.progress import stderr_is_terminal


def summary_line(summary: BatchSummary, output: str) -> str:
    where = f"{summary.replicas} Ray Data replica(s)" if summary.on_ray else "one engine in this process"
    return (
        f"Batch: {summary.rows_written} rows written to {output} by {where} in {summary.wall_s:.1f}s "
        f"({summary.rows_per_s:.2f} rows/s, {summary.output_tok_per_s:.1f} output tok/s); "
        f"{summary.rows_skipped} of {summary.rows_total} rows skipped as already done"
    )


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    batch = cfg.batch
    missing = [key for key in ("input", "output") if batch[key] is None]
    if missing:
        raise ValueError(f"the batch experiment needs {' and '.join(f'batch.{key}=...' for key in missing)}")
    engine = engine_config_from_run_config(cfg)
    params = sampling_params(batch)
    with cpu_threads(cfg.get("cpu_threads"), engine.device) as threads_from:
        facts = {**provenance(engine.device), "torch_threads_from": threads_from}
        config = {**OmegaConf.to_container(cfg, resolve=True), "provenance": facts}
        with wandb_run(cfg.wandb, Path(output_dir), name, "batch", config) as tracked:
            summary = run_batch(
                batch.input,
                batch.output,
                engine,
                params,
                replicas=batch.replicas,
                batch_size=batch.batch_size,
                output_format=batch.format,
                chat_template_kwargs=batch.chat_template_kwargs,
                ray_address=batch.ray_address,
                show_progress=stderr_is_terminal(),
            )
            metrics = dataclasses.asdict(summary)
            results = {
                "name": name,
                "job_type": "batch",
                "metrics": {**metrics, "repeats": 1},
                "repeats": [metrics],
                "provenance": facts,
                "config": config,
            }
            record(tracked, Path(output_dir), results)
    print(summary_line(summary, batch.output))
    return metrics
