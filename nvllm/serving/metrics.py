"""The server's Prometheus metrics: the engine's state read at each scrape (requests running and waiting, KV
blocks in use, prefix-cache hit rate) and each finished request's latencies and token counts."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from nvllm.serving.served_engine import ABORTED, EngineStats, FinishedRequest

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ServerMetrics:
    """One registry per server (several can live in one process, as tests make them); `stats` gives the
    engine's state at each scrape."""

    def __init__(self, stats: Callable[[], EngineStats]):
        self.registry = registry = CollectorRegistry()
        Gauge("nvllm_num_requests_running", "Sequences running", registry=registry).set_function(
            lambda: stats().running
        )
        Gauge("nvllm_num_requests_waiting", "Sequences waiting", registry=registry).set_function(
            lambda: stats().waiting
        )
        Gauge("nvllm_kv_blocks_used", "KV cache blocks in use", registry=registry).set_function(
            lambda: stats().kv_blocks_used
        )
        Gauge("nvllm_kv_blocks_total", "KV cache blocks", registry=registry).set_function(
            lambda: stats().kv_blocks_total
        )
        Gauge(
            "nvllm_prefix_cache_hit_rate",
            "Share of prompt tokens found in the prefix cache",
            registry=registry,
        ).set_function(lambda: stats().prefix_hit_rate)
        self.prompt_tokens = Counter("nvllm_prompt_tokens", "Prompt tokens of requests", registry=registry)
        self.generation_tokens = Counter("nvllm_generation_tokens", "Tokens generated", registry=registry)
        self.requests = Counter(
            "nvllm_requests_finished", "Requests ended", ["finish_reason"], registry=registry
        )
        self.ttft = Histogram(
            "nvllm_time_to_first_token_seconds", "Arrival to first token", buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )  # fmt: skip
        self.tpot = Histogram(
            "nvllm_time_per_output_token_seconds", "Mean time between a request's later tokens",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.queue_time = Histogram(
            "nvllm_request_queue_time_seconds", "Arrival to first prefill step",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.prefill_time = Histogram(
            "nvllm_request_prefill_time_seconds", "First prefill step to first token",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.e2e = Histogram(
            "nvllm_e2e_request_latency_seconds", "Arrival to last token", buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )  # fmt: skip

    def request_finished(self, request: FinishedRequest) -> None:
        """Count a request that ended (on the engine's thread); an aborted one is counted, not timed."""
        samples = request.samples
        self.prompt_tokens.inc(request.num_prompt_tokens)
        self.generation_tokens.inc(request.num_completion_tokens)
        aborted = request.aborted
        self.requests.labels(finish_reason=ABORTED if aborted else "finished").inc()
        if aborted or not samples:
            return
        arrival, first = request.arrival_time, request.first_token_time
        self.ttft.observe(first - arrival)
        if (scheduled := request.first_scheduled_time) is not None:
            self.queue_time.observe(scheduled - arrival)
            self.prefill_time.observe(first - scheduled)
        self.e2e.observe(request.last_token_time - arrival)
        for seq in samples:
            if seq.num_completion_tokens > 1:
                self.tpot.observe(
                    (seq.finished_time - seq.first_token_time) / (seq.num_completion_tokens - 1)
                )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
