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

from experiments.config import workload_config
from experiments.engine import engine_metrics, measured, report, start_engine, warm_up
from experiments.tracking import record, wandb_run
from experiments.workload import make_requests
from nvllm import LLM
from nvllm.engine.llm_engine import Prompt, tokens_per_second
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
    workload = workload_config(cfg)
    if workload.num_seqs != 1:
        raise ValueError(f"workload.num_seqs={workload.num_seqs}: the latency experiment runs one stream")
    with wandb_run(cfg, output_dir, name, job_type="latency") as wandb_job, start_engine(cfg) as llm:
        prompts, params = make_requests(workload, len(llm.tokenizer))
        warm_up(llm)
        with measured(llm) as phases:
            first_token_s, token_s, output_tokens = step_times(llm, prompts[0], params[0])
        for seconds in token_s:
            wandb_job.log({"token_latency_ms": seconds * 1e3})
        metrics = {
            "output_tokens": output_tokens,
            "output_tok_per_s": tokens_per_second(output_tokens, phases["wall_s"]),
            **phases,
            "time_to_first_token_ms": first_token_s * 1e3,
            **latency_percentiles_ms(token_s),
            **engine_metrics(llm),
        }
        record(wandb_job, cfg, output_dir, name, metrics)
    print(report(metrics))
    latencies = [f"p{p} {metrics[f'token_latency_p{p}_ms']:.2f} ms" for p in PERCENTILES if token_s]
    print(
        f"Time to first token: {metrics['time_to_first_token_ms']:.1f} ms; per-token latency: "
        + (", ".join(latencies) or "n/a (a single token)")
    )
    return metrics
