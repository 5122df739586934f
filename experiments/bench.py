"""Throughput, as nano-vLLM's bench measures it: the whole workload in one `generate`; output tok/s is the
generated tokens over its wall time. Prefill and decode tok/s come from the engine's per-step timing."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from experiments.config import workload_config
from experiments.engine import engine_metrics, report, start_engine, timed_generate, warm_up
from experiments.tracking import record, wandb_run
from experiments.workload import make_requests


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    workload = workload_config(cfg)
    with wandb_run(cfg, output_dir, name, job_type="bench") as wandb_job, start_engine(cfg) as llm:
        prompts, params = make_requests(workload, len(llm.tokenizer))
        warm_up(llm)
        _, metrics = timed_generate(llm, prompts, params)
        metrics.update(engine_metrics(llm))
        record(wandb_job, cfg, output_dir, name, metrics)
    print(report(metrics))
    return metrics
