"""What the server's numbers are measured against: the same engine driven offline, in the same process.
- Throughput: `generate` over the requests a rate sent, all at once (the server above saturation should come
  close to it).
- Time to first token: each request alone, with one output token (its prefill, queueing excluded). A low
  request rate's TTFT should come close to it. Back to back, the device never idles; at a low rate it idles
  between requests, so the same prefills are also timed each after the rate's mean gap of idling
  (`offline_ttft_after_idle_*`)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from nvllm.engine.request_validation import Prompt
from nvllm.sampling_params import SamplingParams


def offline_throughput(llm, prompts: list[Prompt], params: list[SamplingParams]) -> dict[str, float]:
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    output_tokens = sum(len(sample.token_ids) for output in outputs for sample in output.outputs)
    return {"offline_output_tokens": output_tokens, "offline_output_tok_per_s": output_tokens / seconds}


IDLE_BUDGET_S = 15.0  # the most time the prefills after idling spend idling


def offline_ttft(
    llm, prompts: list[Prompt], params: list[SamplingParams], rate: float | None = None
) -> tuple[dict[str, float], list[float]]:
    """Each request's prefill alone (`max_tokens=1`), one after another: mean and median in ms, and each
    request's seconds in request order. With a finite `rate`, also the first requests' (as many as idle
    `IDLE_BUDGET_S` in all) each after 1/rate s of idling."""
    prefill_s = [_prefill_seconds(llm, *request) for request in zip(prompts, params)]
    stats = _ttft_stats("offline_ttft", prefill_s)
    if rate is not None and 0 < rate < float("inf"):
        idle_s = 1 / rate
        count = max(1, min(len(prompts), int(IDLE_BUDGET_S / idle_s)))
        seconds = []
        llm.reset_prefix_cache()  # the prompts were just computed: no hits, as for the first pass
        for request in zip(prompts[:count], params[:count]):
            time.sleep(idle_s)
            seconds.append(_prefill_seconds(llm, *request))
        stats.update(_ttft_stats("offline_ttft_after_idle", seconds))
    return stats, prefill_s


def _prefill_seconds(llm, prompt: Prompt, params: SamplingParams) -> float:
    first_token_only = dataclasses.replace(params, max_tokens=1, min_tokens=0)
    start = time.perf_counter()
    llm.generate([prompt], [first_token_only], use_tqdm=False)
    return time.perf_counter() - start


def _ttft_stats(name: str, seconds: list[float]) -> dict[str, float]:
    values = np.array(seconds) * 1e3
    return {f"{name}_mean_ms": float(values.mean()), f"{name}_p50_ms": float(np.median(values))}
