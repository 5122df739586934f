"""Throughput, as nano-vLLM's bench measures it: the whole workload in one `generate`; output tok/s is the
generated tokens over its wall time. Prefill and decode tok/s come from the engine's per-step timing. The
workload runs `workload.repeats` times, on fresh requests each time."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from experiments.harness.engine import engine_metrics, report, timed_generate
from experiments.harness.job import job_run, prepare_job
from experiments.harness.profiling import measured_repeat, save_profile
from experiments.harness.repeats import measure_repeats


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="bench")
    with job_run(job) as run:

        def measure(repeat: int) -> dict:
            with measured_repeat(run.llm, repeat) as utilization:
                metrics = timed_generate(run.llm, *run.requests(repeat))[1]
            return {**metrics, **utilization}

        repeated = measure_repeats(run.llm, job.repeats, measure)
        metrics = {**repeated.spread, **engine_metrics(run.llm)}
        save_profile(run.llm, job.output_dir, run.wandb)
        run.record(metrics, repeated.per_repeat)
    print(report(metrics, job.repeats))
    return metrics
