"""The serving benchmark's load: requests sent to an OpenAI server's /v1/completions at arrival times drawn
from a gamma process (burstiness 1: Poisson) of the given rate, each streamed and timed. The load runs in a
process of its own (`load_at_rate`): parsing every streamed chunk would otherwise compete for the
interpreter with the server it measures, when that server runs in the job's process."""

from __future__ import annotations

import asyncio
import json
import math
import time

import httpx
import numpy as np

from experiments.runners.serving_stats import RequestTiming
from nvllm.sampling_params import SamplingParams


def arrival_gaps(num_requests: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds between sends: gamma(shape=burstiness, mean 1/rate); an infinite rate sends all at once."""
    if math.isinf(rate):
        return [0.0] * num_requests
    rng = np.random.default_rng(seed)
    return list(rng.gamma(burstiness, 1 / (rate * burstiness), size=num_requests))


def served_model(url: str) -> str:
    """The model a server at `url` serves (its /v1/models), or a ValueError saying why there is none."""
    try:
        response = httpx.get(f"{url}/v1/models", timeout=10)
        response.raise_for_status()
        return response.json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as error:
        raise ValueError(f"serving.url={url!r}: no OpenAI server's /v1/models there ({error})") from None


async def timed_request(
    client: httpx.AsyncClient, url: str, model: str, prompt: list[int], params: SamplingParams
) -> RequestTiming:
    body = {
        "model": model, "prompt": prompt, "max_tokens": params.max_tokens, "temperature": params.temperature,
        "ignore_eos": params.ignore_eos, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    timing = RequestTiming(sent=time.perf_counter())
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                timing.error = (await response.aread()).decode()
                return timing
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: ") :])
                if chunk.get("usage"):
                    timing.output_tokens = chunk["usage"]["completion_tokens"]
                elif chunk.get("choices") and chunk["choices"][0]["text"]:
                    timing.chunk_times.append(time.perf_counter())
    except httpx.HTTPError as error:
        timing.error = repr(error)
    return timing


async def send_at_rate(
    url: str, model: str, prompts: list[list[int]], params: list[SamplingParams], gaps: list[float]
) -> tuple[list[RequestTiming], float]:
    """Every request sent after its gap; their timings and the seconds from the first send to the last end."""
    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as client:
        start = time.perf_counter()
        tasks = []
        for prompt, request_params, gap in zip(prompts, params, gaps):
            await asyncio.sleep(gap)
            tasks.append(asyncio.create_task(timed_request(client, url, model, prompt, request_params)))
        timings = await asyncio.gather(*tasks)
        return list(timings), time.perf_counter() - start


def load_at_rate(
    url: str, model: str, prompts: list[list[int]], params: list[SamplingParams], gaps: list[float]
) -> tuple[list[RequestTiming], float]:
    """`send_at_rate` run to its end, in the process that calls it (the load's own)."""
    return asyncio.run(send_at_rate(url, model, prompts, params, gaps))
