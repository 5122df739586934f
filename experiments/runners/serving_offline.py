"""What the server's numbers are measured against: the same engine driven offline, in the same process.
- Throughput: `generate` over the requests a rate sent, all at once (the server above saturation should come
  close to it).
- Time to first token: each request alone, with one output token (its prefill, queueing excluded). A low
  request rate's TTFT should come close to it."""

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


def offline_ttft(llm, prompts: list[Prompt], params: list[SamplingParams]) -> dict[str, float]:
    """Each request's prefill alone (`max_tokens=1`), one after another; mean and median in ms."""
    seconds = []
    for prompt, request_params in zip(prompts, params):
        first_token_only = dataclasses.replace(request_params, max_tokens=1, min_tokens=0)
        start = time.perf_counter()
        llm.generate([prompt], [first_token_only], use_tqdm=False)
        seconds.append(time.perf_counter() - start)
    values = np.array(seconds) * 1e3
    return {"offline_ttft_mean_ms": float(values.mean()), "offline_ttft_p50_ms": float(np.median(values))}
