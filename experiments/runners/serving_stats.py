"""The serving benchmark's numbers from each request's timestamps: throughput, TTFT, TPOT, ITL and
end-to-end latency (mean, p50, p90, p99 in ms), and goodput under the SLOs; and the same requests as the
server's engine saw them (`engine_metrics`), which tells the engine's time from the HTTP side's, and the HTTP
side's split into the way to the engine and the way back (`hop_metrics`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nvllm.serving.served_engine import FinishedRequest

PERCENTILES = (50, 90, 99)


@dataclass
class RequestTiming:
    """One request as the client saw it: when it was sent, when each chunk of tokens arrived (seconds on
    one clock), and how many tokens it generated; `error` where it failed."""

    sent: float
    chunk_times: list[float] = field(default_factory=list)
    sent_wall: float | None = None  # `sent` on the wall clock (time.time), the engine's clock for requests
    output_tokens: int = 0
    error: str | None = None

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.sent

    @property
    def first_chunk_wall(self) -> float:
        return self.sent_wall + self.ttft

    @property
    def e2e(self) -> float:
        return self.chunk_times[-1] - self.sent

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first (None for a single token)."""
        if self.output_tokens < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        return list(np.diff(self.chunk_times))


def summary_ms(name: str, seconds: list[float]) -> dict[str, float | None]:
    values = np.array(seconds) * 1e3
    if not len(values):
        return {f"{name}_{stat}_ms": None for stat in ("mean", *(f"p{p}" for p in PERCENTILES))}
    stats = {f"{name}_mean_ms": float(values.mean())}
    for p, value in zip(PERCENTILES, np.percentile(values, PERCENTILES)):
        stats[f"{name}_p{p}_ms"] = float(value)
    return stats


def serving_metrics(
    timings: list[RequestTiming], duration_s: float, ttft_slo_ms: float, tpot_slo_ms: float
) -> dict:
    done = [t for t in timings if t.error is None and t.chunk_times]
    tpots = [t.tpot for t in done if t.tpot is not None]
    good = [t for t in done if t.ttft * 1e3 <= ttft_slo_ms and (t.tpot or 0) * 1e3 <= tpot_slo_ms]
    output_tokens = sum(t.output_tokens for t in done)

    def per_s(count: int) -> float:  # a rate where nothing completed took no time: none
        return count / duration_s if duration_s > 0 else 0.0

    return {
        "completed": len(done),
        "failed": len(timings) - len(done),
        "duration_s": duration_s,
        "output_tokens": output_tokens,
        "request_throughput": per_s(len(done)),
        "output_tok_per_s": per_s(output_tokens),
        "goodput": per_s(len(good)),
        # 1 while every token leaves in its own chunk; more where chunks carry several (a reader behind)
        "tokens_per_chunk": output_tokens / max(1, sum(len(t.chunk_times) for t in done)),
        **summary_ms("ttft", [t.ttft for t in done]),
        **summary_ms("tpot", tpots),
        **summary_ms("itl", [itl for t in done for itl in t.itls]),
        **summary_ms("e2e", [t.e2e for t in done]),
    }


def ttft_over_prefill(timings: list[RequestTiming], prefill_s: list[float]) -> dict[str, float | None]:
    """Each completed request's TTFT over its own prompt's prefill alone offline (`prefill_s`, in request
    order): median and mean of the ratios. Paired by request, the ratio does not depend on which prompt
    lengths a percentile of either side falls on (short prompts' prefills replay a graph, long ones may not,
    so prefill times are bimodal)."""
    pairs = zip(timings, prefill_s, strict=True)
    ratios = [timing.ttft / alone for timing, alone in pairs if timing.error is None and timing.chunk_times]
    if not ratios:
        return {"ttft_over_prefill_p50": None, "ttft_over_prefill_mean": None}
    return {
        "ttft_over_prefill_p50": float(np.median(ratios)),
        "ttft_over_prefill_mean": float(np.mean(ratios)),
    }


def engine_metrics(finished: list[FinishedRequest]) -> dict:
    """The requests as the engine saw them, from their arrival in the engine to its last token of each: its
    busy span (`engine_duration_s`, the first arrival to the last token) and output throughput over it,
    its time to first token (`engine_ttft_*`: TTFT without the HTTP side) in two parts, waiting for the first
    prefill step that takes the prompt (`engine_queue_*`) and from it to the first token (`engine_prefill_*`),
    and how long the arrivals took to reach it (`engine_intake_s`, first to last arrival; 0 where all come
    at once and the HTTP side keeps up). Aborted requests are left out."""
    done = [request for request in finished if not request.aborted and request.samples]
    if not done:
        return {
            **summary_ms("engine_ttft", []),
            **summary_ms("engine_queue", []),
            **summary_ms("engine_prefill", []),
            "engine_duration_s": None,
            "engine_output_tok_per_s": None,
            "engine_intake_s": None,
        }
    arrivals = [request.arrival_time for request in done]
    duration_s = max(request.last_token_time for request in done) - min(arrivals)
    tokens = sum(request.num_completion_tokens for request in done)
    scheduled = [request for request in done if request.first_scheduled_time is not None]
    return {
        **summary_ms("engine_ttft", [request.first_token_time - request.arrival_time for request in done]),
        **summary_ms("engine_queue", [r.first_scheduled_time - r.arrival_time for r in scheduled]),
        **summary_ms("engine_prefill", [r.first_token_time - r.first_scheduled_time for r in scheduled]),
        "engine_duration_s": duration_s,
        "engine_output_tok_per_s": tokens / duration_s if duration_s > 0 else 0.0,
        "engine_intake_s": max(arrivals) - min(arrivals),
    }


def hop_metrics(
    timings: list[RequestTiming], prompt_lens: list[int], finished: list[FinishedRequest]
) -> dict:
    """Where TTFT goes outside the engine: from the client's send to the request's arrival in the engine
    (`to_engine_*`: HTTP, the server's parsing and the pipe) and from the engine's first token to the client's
    first chunk (`to_client_*`: the pipe, the stream's chunk and HTTP), over the requests paired
    (`hop_pairs`). A client's request and the engine's are paired by prompt length, those of one length in
    order of sending and of arrival; a length with as many requests on each side pairs, one without does
    not (they may have overtaken each other)."""
    sent: dict[int, list[RequestTiming]] = {}
    for timing, length in zip(timings, prompt_lens):
        if timing.error is None and timing.chunk_times and timing.sent_wall is not None:
            sent.setdefault(length, []).append(timing)
    arrived: dict[int, list[FinishedRequest]] = {}
    for request in finished:
        if not request.aborted and request.samples:
            arrived.setdefault(request.num_prompt_tokens, []).append(request)
    pairs = []
    for length, clients in sent.items():
        engines = arrived.get(length, [])
        if len(engines) == len(clients):
            clients = sorted(clients, key=lambda timing: timing.sent_wall)
            pairs += zip(clients, sorted(engines, key=lambda request: request.arrival_time))
    return {
        "hop_pairs": len(pairs),
        **summary_ms("to_engine", [request.arrival_time - t.sent_wall for t, request in pairs]),
        **summary_ms("to_client", [t.first_chunk_wall - request.first_token_time for t, request in pairs]),
    }
