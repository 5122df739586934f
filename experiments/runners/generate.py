"""The default experiment: generate for a few prompts, print each completion, then one throughput line."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from experiments.harness.engine import engine_metrics, throughput_line, timed_generate
from experiments.harness.job import job_run, prepare_job
from experiments.harness.repeats import measure_repeats


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="generate")
    shown = []  # the first repeat's prompts and completions

    with job_run(job) as run:

        def measure(repeat: int) -> dict:
            prompts, params = run.requests(repeat)
            outputs, measured = timed_generate(run.llm, prompts, params)
            if not shown:
                shown.extend(zip(prompts, outputs, strict=True))
            return measured

        repeated = measure_repeats(run.llm, job.repeats, measure)
        metrics = {**repeated.spread, **engine_metrics(run.llm)}
        run.record(metrics, repeated.per_repeat)
    for prompt, output in shown:
        prompt = prompt if isinstance(prompt, str) else f"<{len(prompt)} random tokens>"
        print(f"Prompt: {prompt!r}\nCompletion: {output['text']!r}\n")
    print(f"{throughput_line(metrics, job.repeats)}; startup {metrics['startup_s']:.1f}s")
    return metrics
