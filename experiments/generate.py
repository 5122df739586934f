"""The default experiment: generate for a few prompts, print each completion, then one throughput line."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from experiments.config import workload_config
from experiments.engine import engine_metrics, start_engine, throughput_line, timed_generate
from experiments.tracking import record, wandb_run
from experiments.workload import make_requests


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    workload = workload_config(cfg)
    with wandb_run(cfg, output_dir, name, job_type="generate") as wandb_job, start_engine(cfg) as llm:
        prompts, params = make_requests(workload, len(llm.tokenizer))
        outputs, metrics = timed_generate(llm, prompts, params, use_tqdm=False)
        metrics.update(engine_metrics(llm))
        record(wandb_job, cfg, output_dir, name, metrics)
    for prompt, output in zip(prompts, outputs, strict=True):
        shown = prompt if isinstance(prompt, str) else f"<{len(prompt)} random tokens>"
        print(f"Prompt: {shown!r}\nCompletion: {output['text']!r}\n")
    print(f"{throughput_line(metrics)}; startup {metrics['startup_s']:.1f}s")
    return metrics
