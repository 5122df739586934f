"""The server's Prometheus metrics from a finished request's hand-computed times."""

import pytest

from nvllm.serving.metrics import ServerMetrics
from nvllm.serving.served_engine import EngineStats, FinishedRequest, SampleTimes


def sample_value(metrics: ServerMetrics, name: str) -> float:
    return metrics.registry.get_sample_value(name)


def test_a_request_s_times_split_into_queue_and_prefill():
    metrics = ServerMetrics(lambda: EngineStats(running=2))
    # arrived at 10.0, first prefill step at 10.25, first tokens at 10.5 and 10.75, last at 12.5
    samples = (SampleTimes(5, 10.0, 10.5, 12.5), SampleTimes(3, 10.0, 10.75, 11.0))
    metrics.request_finished(FinishedRequest(7, samples, first_scheduled_time=10.25))
    assert sample_value(metrics, "nvllm_request_queue_time_seconds_sum") == pytest.approx(0.25)
    assert sample_value(metrics, "nvllm_request_prefill_time_seconds_sum") == pytest.approx(0.25)
    assert sample_value(metrics, "nvllm_time_to_first_token_seconds_sum") == pytest.approx(0.5)
    assert sample_value(metrics, "nvllm_e2e_request_latency_seconds_sum") == pytest.approx(2.5)
    # per sample: (12.5 - 10.5) / 4 and (11.0 - 10.75) / 2
    assert sample_value(metrics, "nvllm_time_per_output_token_seconds_sum") == pytest.approx(0.5 + 0.125)
    assert sample_value(metrics, "nvllm_generation_tokens_total") == 8
    assert sample_value(metrics, "nvllm_num_requests_running") == 2


def test_an_aborted_request_is_counted_not_timed():
    metrics = ServerMetrics(EngineStats)
    metrics.request_finished(FinishedRequest(7, (SampleTimes(2, 10.0, 10.5, None),), 10.25))
    finished = metrics.registry.get_sample_value("nvllm_requests_finished_total", {"finish_reason": "abort"})
    assert finished == 1
    assert sample_value(metrics, "nvllm_request_queue_time_seconds_count") == 0
    assert sample_value(metrics, "nvllm_time_to_first_token_seconds_count") == 0
