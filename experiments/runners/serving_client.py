"""The serving benchmark's load: requests sent to an OpenAI server's /v1/completions at arrival times drawn
from a gamma process (burstiness 1: Poisson) of the given rate, each streamed and timed. The load runs in
processes of its own (`LoadProcesses`), each sending its share of the requests at their times on the one
schedule: parsing every streamed chunk in the server's process would compete for its interpreter, and one
client process parsing the chunks of a loaded server is slower than the server. Times are read from
`time.monotonic`, one clock for all of the machine's processes (CLOCK_MONOTONIC)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import multiprocessing
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import aiohttp
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
        with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as response:
            return json.load(response)["data"][0]["id"]
    except (OSError, ValueError, KeyError, IndexError) as error:  # urllib's errors are OSErrors
        raise ValueError(f"serving.url={url!r}: no OpenAI server's /v1/models there ({error})") from None


async def timed_request(
    session: aiohttp.ClientSession, url: str, model: str, prompt: list[int], params: SamplingParams
) -> RequestTiming:
    body = {
        "model": model, "prompt": prompt, "max_tokens": params.max_tokens, "temperature": params.temperature,
        "ignore_eos": params.ignore_eos, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    timing = RequestTiming(sent=time.monotonic(), sent_wall=time.time())
    try:
        async with session.post(f"{url}/v1/completions", json=body) as response:
            if response.status != 200:
                timing.error = (await response.read()).decode()
                return timing
            pending = b""  # the start of an event line whose end has not arrived
            async for data in response.content.iter_any():
                now = time.monotonic()
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    _read_event(line, now, timing)
    except aiohttp.ClientError as error:
        timing.error = repr(error)
    return timing


def _read_event(line: bytes, arrived: float, timing: RequestTiming) -> None:
    """One line of the stream into `timing`: a chunk with text arrived at `arrived`, or the usage."""
    if not line.startswith(b"data: ") or line == b"data: [DONE]":
        return
    chunk = json.loads(line[len(b"data: ") :])
    if chunk.get("usage"):
        timing.output_tokens = chunk["usage"]["completion_tokens"]
    elif chunk.get("choices") and chunk["choices"][0]["text"]:
        timing.chunk_times.append(arrived)


async def send_on_schedule(
    url: str,
    model: str,
    prompts: list[list[int]],
    params: list[SamplingParams],
    offsets: list[float],
    ready: Callable[[], None] = lambda: None,
) -> list[RequestTiming]:
    """Every request sent `offsets[i]` seconds after the client is made and `ready()` returned; their
    timings."""
    connector = aiohttp.TCPConnector(limit=0)  # no cap on connections: every request goes when due
    no_timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=no_timeout) as session:
        ready()
        start, tasks = time.monotonic(), []
        for prompt, request_params, offset in zip(prompts, params, offsets, strict=True):
            await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
            tasks.append(asyncio.create_task(timed_request(session, url, model, prompt, request_params)))
        return list(await asyncio.gather(*tasks))


_together: threading.Barrier | None = None  # a load process's: its share starts with every other share's
START_TIMEOUT_S = 120  # how long a share waits for the others to be ready (process start-up included)


def _join_load(together: threading.Barrier) -> None:
    global _together
    _together = together


def _send_share(
    url: str, model: str, prompts: list[list[int]], params: list[SamplingParams], offsets: list[float]
) -> list[RequestTiming]:
    ready = partial(_together.wait, START_TIMEOUT_S)  # the schedule starts once every share is ready
    return asyncio.run(send_on_schedule(url, model, prompts, params, offsets, ready))


class LoadProcesses:
    """`count` client processes (spawned once, reused for every rate) that send a rate's requests between
    them, request i by process i mod count, at the times of one arrival schedule."""

    def __init__(self, count: int):
        if count < 1:
            raise ValueError(f"serving.load_processes={count} must be 1 or more")
        context = multiprocessing.get_context("spawn")
        self.count = count
        self._pool = ProcessPoolExecutor(
            count, context, initializer=_join_load, initargs=(context.Barrier(count),)
        )

    def send(
        self, url: str, model: str, prompts: list[list[int]], params: list[SamplingParams], gaps: list[float]
    ) -> tuple[list[RequestTiming], float]:
        """The requests sent with `gaps` seconds between them (the first after its gap from the start); their
        timings in request order and the seconds from the first send to the last chunk."""
        offsets = list(itertools.accumulate(gaps))
        shares = [
            self._pool.submit(_send_share, url, model, prompts[i :: self.count], params[i :: self.count],
                              offsets[i :: self.count])
            for i in range(self.count)
        ]  # fmt: skip
        timings: list[RequestTiming] = [None] * len(prompts)
        for i, share in enumerate(shares):
            timings[i :: self.count] = share.result()
        ends = [timing.chunk_times[-1] for timing in timings if timing.chunk_times]
        duration = max(ends) - min(timing.sent for timing in timings) if ends else 0.0
        return timings, duration

    def __enter__(self) -> LoadProcesses:
        return self

    def __exit__(self, *exc_info) -> None:
        self._pool.shutdown()
