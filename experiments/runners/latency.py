"""Single-stream decode latency: one request stepped through the engine by hand, every step timed.

Time to first token covers the prompt's prefill step(s). A later step is a decode round that yields up to
`scheduler.num_decode_steps` tokens at once; each of its tokens is given the round's time divided by its
tokens (the steady inter-token time), and those per-token latencies are logged as a series and
summarised by percentiles. `scheduler.num_decode_steps=1` makes every token reach the host on its own."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from experiments.harness.engine import engine_metrics, measured, report
from experiments.harness.job import job_run, prepare_job
from experiments.harness.profiling import measured_repeat, save_profile
from experiments.harness.repeats import measure_repeats
from nvllm import LLM
from nvllm.engine.llm_engine import Prompt
from nvllm.engine.rates import tokens_per_second
from nvllm.sampling_params import SamplingParams

PERCENTILES = (50, 90, 99)


def step_times(llm: LLM, prompt: Prompt, params: SamplingParams) -> tuple[float, list[float], int]:
    """Seconds to the first token, the latency of every later token, and the number of tokens generated."""
    seq = llm.add_request(prompt, params)
    start = time.perf_counter()
    first_token_s, token_s = None, []
    while not llm.is_finished():
        step_start = time.perf_counter()
        num_before = seq.num_completion_tokens
        llm.step()
        now = time.perf_counter()
        num_new = seq.num_completion_tokens - num_before
        if not num_new:
            continue  # a prefill chunk
        if first_token_s is None:
            first_token_s = now - start
        else:
            token_s.extend([(now - step_start) / num_new] * num_new)
    return first_token_s, token_s, seq.num_completion_tokens


def latency_percentiles_ms(token_s: list[float]) -> dict:
    """p50/p90/p99 of the per-token latencies; None when only the first token was generated."""
    if not token_s:
        return {f"token_latency_p{p}_ms": None for p in PERCENTILES}
    values = np.percentile(np.array(token_s) * 1e3, PERCENTILES)
    return {f"token_latency_p{p}_ms": float(ms) for p, ms in zip(PERCENTILES, values, strict=True)}


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="latency")
    if job.workload.num_seqs != 1:
        raise ValueError(f"workload.num_seqs={job.workload.num_seqs}: the latency experiment runs one stream")
    with job_run(job) as run:

        def measure(repeat: int) -> dict:
            prompts, params = run.requests(repeat)
            with measured(run.llm) as phases, measured_repeat(run.llm, repeat) as utilization:
                first_token_s, token_s, output_tokens = step_times(run.llm, prompts[0], params[0])
            for seconds in token_s:
                run.wandb.log({"token_latency_ms": seconds * 1e3})
            return {
                "output_tokens": output_tokens,
                "output_tok_per_s": tokens_per_second(output_tokens, phases["wall_s"]),
                **phases,
                "time_to_first_token_ms": first_token_s * 1e3,
                **latency_percentiles_ms(token_s),
                **utilization,
            }

        repeated = measure_repeats(run.llm, job.repeats, measure)
        metrics = {**repeated.spread, **engine_metrics(run.llm)}
        save_profile(run.llm, job.output_dir, run.wandb)
        run.record(metrics, repeated.per_repeat)
    print(report(metrics, job.repeats))
    latencies = [
        f"p{p} {metrics[f'token_latency_p{p}_ms']:.2f} ms"
        for p in PERCENTILES
        if metrics[f"token_latency_p{p}_ms"] is not None
    ]
    print(
        f"Time to first token: {metrics['time_to_first_token_ms']:.1f} ms; per-token latency: "
        + (", ".join(latencies) or "n/a (a single token)")
        + (f" (medians of {job.repeats} repeats)" if job.repeats > 1 else "")
    )
    return metrics
