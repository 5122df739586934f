"""`+experiment=serving` on the tiny model at two rates, and its statistics against hand-computed ones."""

import json

import pytest

from experiments.runners import serving
from experiments.runners.serving_client import arrival_gaps
from experiments.runners.serving_stats import RequestTiming, serving_metrics
from nvllm.run import compose_config
from tests.helpers.experiment_utils import SMALL_WORKLOAD, TINY


def test_percentiles_and_goodput_from_hand_computed_timestamps():
    timings = [
        RequestTiming(sent=0.0, chunk_times=[0.1, 0.2, 0.4], output_tokens=3),  # TTFT 100, TPOT 150
        RequestTiming(sent=1.0, chunk_times=[1.3, 1.4], output_tokens=2),  # TTFT 300, TPOT 100
        RequestTiming(sent=2.0, error="500"),
        RequestTiming(sent=3.0, chunk_times=[3.05], output_tokens=1),  # TTFT 50, no TPOT
    ]
    metrics = serving_metrics(timings, duration_s=2.0, ttft_slo_ms=200, tpot_slo_ms=200)
    assert metrics["completed"] == 3 and metrics["failed"] == 1
    assert metrics["output_tokens"] == 6 and metrics["output_tok_per_s"] == pytest.approx(3.0)
    assert metrics["request_throughput"] == pytest.approx(1.5)
    assert metrics["goodput"] == pytest.approx(1.0)  # the second misses the TTFT SLO
    # numpy's linear interpolation over the sorted values: p90 of [50, 100, 300] = 100 + 0.8 * 200
    expected = {
        "ttft": (150, 100, 260, 296),
        "tpot": (125, 125, 145, 149.5),  # [100, 150]
        "itl": (400 / 3, 100, 180, 198),  # [100, 100, 200]
        "e2e": (850 / 3, 400, 400, 400),  # [50, 400, 400]
    }
    for name, (mean, p50, p90, p99) in expected.items():
        stats = [metrics[f"{name}_{stat}_ms"] for stat in ("mean", "p50", "p90", "p99")]
        assert stats == pytest.approx([mean, p50, p90, p99]), name


def test_no_completed_request_has_no_latencies():
    metrics = serving_metrics([RequestTiming(sent=0.0, error="refused")], 1.0, 500, 50)
    assert (metrics["completed"], metrics["failed"], metrics["goodput"]) == (0, 1, 0)
    assert metrics["ttft_p50_ms"] is None and metrics["e2e_mean_ms"] is None


def test_arrivals_have_the_rate_and_inf_sends_at_once():
    gaps = arrival_gaps(4000, rate=8.0, burstiness=1.0, seed=0)
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 8, rel=0.05)
    assert arrival_gaps(3, float("inf"), 1.0, 0) == [0.0, 0.0, 0.0]


def test_serving_experiment_at_two_rates(tmp_path):
    overrides = ["+experiment=serving", *TINY, *SMALL_WORKLOAD, "wandb.mode=disabled", "wandb.group=null"]
    overrides += ["serving.request_rates=[20,inf]", "workload.num_seqs=4"]
    metrics = serving.run(compose_config(overrides), tmp_path)
    for row in metrics["per_rate"]:
        assert row["completed"] == 4 and row["failed"] == 0
        assert 0 < row["ttft_p50_ms"] <= row["ttft_p99_ms"] <= row["e2e_p99_ms"]
        assert row["output_tokens"] > 0 and row["output_tok_per_s"] > 0
    assert (tmp_path / serving.FIGURE).is_file()
    assert json.loads((tmp_path / "results.json").read_text())["metrics"]["completed@20"] == 4
