"""Priority scheduling under memory pressure: time to first token and end-to-end latency per priority class.

Every `HIGH_PRIORITY_EVERY`-th request of the workload is high priority (0), the others low (1). They arrive
over the first steps, a wave of `num_seqs / ARRIVAL_WAVES` requests per engine step, so that high-priority
requests arrive while low-priority ones hold the KV cache (the experiment's config makes it small).
`+experiment=priority` runs the same requests under `scheduler.policy=fcfs` and `priority`, one job each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from experiments.harness.engine import engine_metrics, measured, report
from experiments.harness.job import job_run, prepare_job
from experiments.harness.repeats import measure_repeats
from nvllm import LLM
from nvllm.engine.llm_engine import Prompt
from nvllm.engine.rates import tokens_per_second
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence

HIGH_PRIORITY_EVERY = 4
ARRIVAL_WAVES = 8
CLASSES = {"high": 0, "low": 1}


def priority_of(index: int) -> int:
    return CLASSES["high"] if index % HIGH_PRIORITY_EVERY == 0 else CLASSES["low"]


def serve_arriving(llm: LLM, prompts: list[Prompt], params: list[SamplingParams]) -> list[Sequence]:
    """Run the requests to the end, adding a wave of them before each step until all have arrived."""
    wave = max(1, len(prompts) // ARRIVAL_WAVES)
    seqs: list[Sequence] = []
    while len(seqs) < len(prompts) or not llm.is_finished():
        for index in range(len(seqs), min(len(seqs) + wave, len(prompts))):
            seqs.append(llm.add_request(prompts[index], params[index], priority=priority_of(index)))
        llm.step()
    return seqs


def class_metrics(seqs: list[Sequence]) -> dict:
    """Mean and p90 of the time to first token and of the end-to-end latency, per priority class."""
    metrics = {}
    for name, priority in CLASSES.items():
        members = [seq for seq in seqs if seq.priority == priority]
        metrics[f"num_{name}_priority"] = len(members)
        series = {
            "ttft": [seq.first_token_time - seq.arrival_time for seq in members],
            "latency": [seq.finished_time - seq.arrival_time for seq in members],
        }
        for kind, seconds in series.items():
            values = np.array(seconds) * 1e3
            metrics[f"{kind}_{name}_mean_ms"] = float(values.mean()) if len(values) else None
            metrics[f"{kind}_{name}_p90_ms"] = float(np.percentile(values, 90)) if len(values) else None
    return metrics


def class_report(metrics: dict) -> str:
    return "\n".join(
        f"{name} priority ({metrics[f'num_{name}_priority']} requests): time to first token mean "
        f"{metrics[f'ttft_{name}_mean_ms']:.1f} ms, p90 {metrics[f'ttft_{name}_p90_ms']:.1f} ms; "
        f"latency mean {metrics[f'latency_{name}_mean_ms']:.1f} ms, "
        f"p90 {metrics[f'latency_{name}_p90_ms']:.1f} ms"
        for name in CLASSES
        if metrics[f"num_{name}_priority"]
    )


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="priority")
    with job_run(job) as run:

        def measure(repeat: int) -> dict:
            with measured(run.llm) as phases:
                seqs = serve_arriving(run.llm, *run.requests(repeat))
            output_tokens = sum(seq.num_completion_tokens for seq in seqs)
            return {
                "output_tokens": output_tokens,
                "output_tok_per_s": tokens_per_second(output_tokens, phases["wall_s"]),
                **phases,
                **class_metrics(seqs),
            }

        repeated = measure_repeats(run.llm, job.repeats, measure)
        metrics = {**repeated.spread, **engine_metrics(run.llm)}
        run.record(metrics, repeated.per_repeat)
    print(f"scheduler.policy={job.engine.scheduler.policy}")
    print(report(metrics, job.repeats))
    print(class_report(metrics))
    return metrics
