"""`+experiment=serving` on the tiny model at two rates, and its statistics against hand-computed ones."""

import json

import numpy as np
import pytest

from experiments.harness.job import check_job_config
from experiments.harness.sharegpt import read_sharegpt
from experiments.runners import serving
from experiments.runners.serving_client import arrival_gaps
from experiments.runners.serving_offline import offline_ttft
from experiments.runners.serving_stats import (
    RequestTiming,
    engine_metrics,
    hop_metrics,
    serving_metrics,
    ttft_over_prefill,
)
from nvllm import LLM, SamplingParams
from nvllm.engine.llm_engine import LLMEngine
from nvllm.profiling.timeline import read_run_dir
from nvllm.run import compose_config
from nvllm.serving.served_engine import FinishedRequest, SampleTimes
from nvllm.serving.server import app_for, background_server
from nvllm.tokenizer.tokenizer import load_tokenizer
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
    assert metrics["tokens_per_chunk"] == pytest.approx(1.0)  # 6 tokens in 6 chunks
    joined = [RequestTiming(sent=0.0, chunk_times=[0.1, 0.2], output_tokens=5)]
    assert serving_metrics(joined, 1.0, 200, 200)["tokens_per_chunk"] == pytest.approx(2.5)
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


def test_the_engine_s_span_and_throughput_from_hand_computed_times():
    finished = [
        FinishedRequest(5, (SampleTimes(4, 10.0, 10.5, 12.0), SampleTimes(2, 10.0, 10.5, 13.0)), 10.1),
        FinishedRequest(5, (SampleTimes(6, 10.5, 11.0, 12.5),)),  # a server that does not say when scheduled
        FinishedRequest(5, (SampleTimes(3, 9.0, 9.5, None),)),  # aborted: not counted
    ]
    metrics = engine_metrics(finished)
    assert metrics["engine_duration_s"] == pytest.approx(3.0)  # arrival 10.0 to the last token at 13.0
    assert metrics["engine_output_tok_per_s"] == pytest.approx(12 / 3.0)
    assert metrics["engine_intake_s"] == pytest.approx(0.5)
    assert metrics["engine_ttft_p50_ms"] == pytest.approx(500)  # first tokens 0.5 s after each arrival
    assert metrics["engine_queue_p50_ms"] == pytest.approx(100)  # of the one that says: 0.1 s waiting
    assert metrics["engine_prefill_p50_ms"] == pytest.approx(400)  # and 0.4 s to its first token
    assert engine_metrics(finished[2:])["engine_duration_s"] is None


def test_the_hops_to_the_engine_and_back_from_hand_computed_times():
    timings = [  # sent (wall clock) and the first chunk 0.3 s / 0.2 s later; the third failed
        RequestTiming(sent=0.0, chunk_times=[0.3], output_tokens=1, sent_wall=100.0),
        RequestTiming(sent=1.0, chunk_times=[1.2], output_tokens=1, sent_wall=101.0),
        RequestTiming(sent=2.0, error="500", sent_wall=102.0),
    ]
    finished = [  # listed as they ended, not as they arrived
        FinishedRequest(7, (SampleTimes(1, 101.05, 101.15, 101.15),)),
        FinishedRequest(5, (SampleTimes(1, 100.01, 100.27, 100.27),)),
    ]
    metrics = hop_metrics(timings, [5, 7, 9], finished)
    assert metrics["hop_pairs"] == 2
    assert metrics["to_engine_p50_ms"] == pytest.approx(30)  # 10 ms and 50 ms
    assert metrics["to_engine_mean_ms"] == pytest.approx(30)
    assert metrics["to_client_p50_ms"] == pytest.approx(40)  # 30 ms and 50 ms
    # paired by prompt length, not by order: the second request sent overtook the first on its way
    sent = [
        RequestTiming(sent=0.0, chunk_times=[0.010], output_tokens=1, sent_wall=100.000),  # 7 tokens
        RequestTiming(sent=0.001, chunk_times=[0.006], output_tokens=1, sent_wall=100.001),  # 5 tokens
    ]
    overtaken = [
        FinishedRequest(5, (SampleTimes(1, 100.003, 100.004, 100.004),)),
        FinishedRequest(7, (SampleTimes(1, 100.005, 100.008, 100.008),)),
    ]
    metrics = hop_metrics(sent, [7, 5], overtaken)
    assert metrics["hop_pairs"] == 2
    assert metrics["to_engine_p99_ms"] == pytest.approx(2 + 0.99 * 3)  # 5 ms and 2 ms (3 and 4 in order)
    assert metrics["to_client_p50_ms"] == pytest.approx(2)  # 2 ms each
    # one length, two requests on each side: in order of sending and of arrival
    same = [RequestTiming(sent=0.0, chunk_times=[0.3], output_tokens=1, sent_wall=t) for t in (100.0, 101.0)]
    ended = [FinishedRequest(5, (SampleTimes(1, t, t + 0.1, t + 0.1),)) for t in (101.02, 100.01)]
    assert hop_metrics(same, [5, 5], ended)["to_engine_p50_ms"] == pytest.approx(15)  # 10 ms and 20 ms
    # a length with a request missing on one side pairs none of its own
    assert hop_metrics(same, [5, 5], ended[:1])["hop_pairs"] == 0


def test_ttft_over_each_request_s_own_prefill_from_hand_computed_times():
    timings = [
        RequestTiming(sent=0.0, chunk_times=[0.012]),  # 12 ms over a 10 ms prefill: 1.2
        RequestTiming(sent=1.0, chunk_times=[1.045]),  # 45 ms over 30 ms: 1.5
        RequestTiming(sent=2.0, error="refused"),  # no TTFT: not counted
        RequestTiming(sent=3.0, chunk_times=[3.004]),  # 4 ms over 4 ms: 1.0
    ]
    ratios = ttft_over_prefill(timings, [0.010, 0.030, 0.020, 0.004])
    assert ratios["ttft_over_prefill_p50"] == pytest.approx(1.2)
    assert ratios["ttft_over_prefill_mean"] == pytest.approx((1.2 + 1.5 + 1.0) / 3)
    nothing_completed = ttft_over_prefill(timings[2:3], [0.02])
    assert nothing_completed == {"ttft_over_prefill_p50": None, "ttft_over_prefill_mean": None}


def test_no_completed_request_has_no_latencies():
    metrics = serving_metrics([RequestTiming(sent=0.0, error="refused")], 1.0, 500, 50)
    assert (metrics["completed"], metrics["failed"], metrics["goodput"]) == (0, 1, 0)
    assert metrics["ttft_p50_ms"] is None and metrics["e2e_mean_ms"] is None
    # every request failed: no chunk, so the run measured no time (LoadProcesses' duration 0)
    metrics = serving_metrics([RequestTiming(sent=0.0, error="refused")], 0.0, 500, 50)
    assert (metrics["output_tok_per_s"], metrics["request_throughput"], metrics["goodput"]) == (0, 0, 0)


def test_arrivals_have_the_rate_and_inf_sends_at_once():
    gaps = arrival_gaps(4000, rate=8.0, burstiness=1.0, seed=0)
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 8, rel=0.05)
    assert arrival_gaps(3, float("inf"), 1.0, 0) == [0.0, 0.0, 0.0]


def test_serving_experiment_at_two_rates(tmp_path):
    overrides = ["+experiment=serving", *TINY, *SMALL_WORKLOAD, "wandb.mode=disabled", "wandb.group=null"]
    overrides += ["serving.request_rates=[20,inf]", "workload.num_seqs=4", "serving.load_processes=2"]
    overrides += ["serving.engine_process=false"]  # the server's engine on a thread of this process
    metrics = serving.run(compose_config(overrides), tmp_path)
    for row in metrics["per_rate"]:
        assert row["completed"] == 4 and row["failed"] == 0
        assert 0 < row["ttft_p50_ms"] <= row["ttft_p99_ms"] <= row["e2e_p99_ms"]
        assert row["output_tokens"] > 0 and row["output_tok_per_s"] > 0
        # the engine's span lies within the client's: from the first arrival to the last token
        assert 0 < row["engine_duration_s"] < row["duration_s"]
        assert row["engine_output_tok_per_s"] > row["output_tok_per_s"]
    assert metrics["offline_ttft_after_idle_p50_ms"] > 0  # each prefill after 1/20 s of idling
    assert metrics["ttft_over_prefill_p50"] > 0  # the lowest rate's requests against their prefills
    assert (tmp_path / serving.FIGURE).is_file()
    assert json.loads((tmp_path / "results.json").read_text())["metrics"]["completed@20"] == 4


def test_serving_experiment_with_the_engine_in_a_process_of_its_own(tmp_path):
    overrides = ["+experiment=serving", *TINY, *SMALL_WORKLOAD, "wandb.mode=disabled", "wandb.group=null"]
    overrides += ["serving.request_rates=[inf]", "workload.num_seqs=4", "serving.engine_process=true"]
    overrides += ["serving.load_processes=1", "profile.enabled=true"]
    metrics = serving.run(compose_config(overrides), tmp_path)
    row = metrics["per_rate"][0]
    assert row["completed"] == 4 and row["failed"] == 0 and row["output_tokens"] > 0
    assert metrics["offline_output_tok_per_s"] > 0  # the offline engine, built once the server stopped
    assert 0 < row["engine_duration_s"] < row["duration_s"]  # the times of the engine's own process
    assert 0 < row["engine_ttft_p50_ms"] < row["ttft_p99_ms"]
    assert 0 <= row["engine_queue_p50_ms"] and 0 < row["engine_prefill_p50_ms"] <= row["engine_ttft_p99_ms"]
    # the server's engine wrote its profile from its own process: every request it served, every token
    _, requests, _ = read_run_dir(tmp_path / serving.ENGINE_PROFILE_DIR)
    assert len(requests) == 4 and sum(request["output_len"] for request in requests) == row["output_tokens"]


MAX_MODEL_LEN = 64
EXCHANGES = [  # (first human turn, first gpt turn after it)
    ("Hello there, how are you today?", "Fine, thanks. And you?"),
    ("Name three colours.", "Red, green and blue are three colours that most people can name."),
    (
        "Write a haiku about the sea.",
        "Waves fold into foam / salt wind carries gull voices / the tide keeps its time",
    ),
]
CONVERSATIONS = [
    {
        "conversations": [
            {"from": "human", "value": EXCHANGES[0][0]},
            {"from": "gpt", "value": EXCHANGES[0][1]},
        ]
    },
    {
        "id": "system first, then more turns",
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": EXCHANGES[1][0]},
            {"from": "gpt", "value": EXCHANGES[1][1]},
            {"from": "human", "value": "And three more?"},
            {"from": "gpt", "value": "Cyan, magenta, yellow."},
        ],
    },
    {
        "conversations": [
            {"from": "human", "value": EXCHANGES[2][0]},
            {"from": "gpt", "value": EXCHANGES[2][1]},
        ]
    },
    {"conversations": [{"from": "human", "value": "word " * 80}, {"from": "gpt", "value": "Too long."}]},
    {"conversations": [{"from": "human", "value": "Short."}, {"from": "gpt", "value": "word " * 80}]},
    {"conversations": [{"from": "human", "value": "No answer."}]},
    {"conversations": [{"from": "gpt", "value": "An answer first."}, {"from": "human", "value": "Then?"}]},
    {"conversations": [{"from": "human", "value": "An empty answer."}, {"from": "gpt", "value": ""}]},
    "not a conversation",
]


@pytest.fixture
def sharegpt_file(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(CONVERSATIONS))
    return path


def test_sharegpt_first_exchanges_tokenized_too_long_and_incomplete_counted(sharegpt_file):
    tokenizer = load_tokenizer(None)  # the tiny model's
    pool = read_sharegpt(str(sharegpt_file), tokenizer, MAX_MODEL_LEN)
    expected = [(tokenizer.encode(human), len(tokenizer.encode(gpt))) for human, gpt in EXCHANGES]
    assert pool.requests == expected
    assert (pool.num_skipped_too_long, pool.num_skipped_incomplete) == (2, 4)
    assert all(len(prompt) + output_len <= MAX_MODEL_LEN for prompt, output_len in pool.requests)


def test_a_sharegpt_file_that_is_no_list_or_has_nothing_that_fits_is_refused(tmp_path):
    tokenizer = load_tokenizer(None)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"conversations": []}))
    with pytest.raises(ValueError, match="must hold a JSON list"):
        read_sharegpt(str(path), tokenizer, MAX_MODEL_LEN)
    path.write_text(json.dumps(CONVERSATIONS[3:]))
    with pytest.raises(ValueError, match="2 too long, 4 without"):
        read_sharegpt(str(path), tokenizer, MAX_MODEL_LEN)
    with pytest.raises(ValueError, match="no such file"):
        read_sharegpt(str(tmp_path / "missing.json"), tokenizer, MAX_MODEL_LEN)


def test_a_run_at_a_url_measures_that_server_without_an_engine_of_its_own(
    tmp_path, sharegpt_file, monkeypatch, capsys
):
    """The server started here; the job, pointed at its URL with a ShareGPT workload, builds no engine and
    gets every conversation that fits, each with its gpt turn's length of output."""
    server_engine = LLM("tiny", enforce_eager=True, max_num_seqs=8)
    built = []
    engine_init = LLMEngine.__init__
    monkeypatch.setattr(
        LLMEngine, "__init__", lambda self, *a, **k: built.append(1) or engine_init(self, *a, **k)
    )
    with background_server(app_for(server_engine, "tiny")) as url:
        overrides = ["+experiment=serving", *TINY, "wandb.mode=disabled", "wandb.group=null"]
        overrides += [f"serving.url={url}", "serving.request_rates=[inf]", "workload.num_seqs=8"]
        overrides += [f"workload.sharegpt_file={sharegpt_file}", f"scheduler.max_model_len={MAX_MODEL_LEN}"]
        metrics = serving.run(compose_config(overrides), tmp_path)
    assert not built, "the job built an engine of its own"
    printed = capsys.readouterr().out
    assert "3 conversations used, 2 skipped as longer than scheduler.max_model_len, 4 without" in printed
    assert "fewer than workload.num_seqs=8" in printed
    tokenizer = load_tokenizer(None)
    [row] = metrics["per_rate"]
    assert row["completed"] == len(EXCHANGES) and row["failed"] == 0
    assert row["output_tokens"] == sum(len(tokenizer.encode(gpt)) for _, gpt in EXCHANGES)  # ignore_eos
    assert 0 < row["ttft_p50_ms"] <= row["e2e_p99_ms"]
    recorded = json.loads((tmp_path / "results.json").read_text())["metrics"]
    assert recorded["sharegpt_skipped_too_long"] == 2 and recorded["sharegpt_skipped_incomplete"] == 4
    assert recorded["sharegpt_conversations_used"] == len(EXCHANGES)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["workload.sharegpt_file=missing.json"], "no such file"),
        (["workload.sharegpt_file=x.json", "workload=lengths_from_file"], "excludes workload.prompts"),
    ],
)
def test_a_bad_sharegpt_workload_stops_the_job_before_the_engine(extra, words):
    with pytest.raises(ValueError, match=words):
        check_job_config(compose_config(["+experiment=serving", *TINY, *extra]))


def test_offline_prefills_after_idling_find_no_prompt_in_the_prefix_cache(tiny_checkpoint):
    llm = LLM(str(tiny_checkpoint), enforce_eager=True, kvcache_block_size=16, num_kvcache_blocks=64)
    prompts = [list(range(10 + i, 60 + i)) for i in range(3)]  # three full blocks each, no shared prefix
    params = [SamplingParams(max_tokens=4)] * 3
    stats, prefill_s = offline_ttft(llm, prompts, params, rate=200.0)
    assert stats["offline_ttft_after_idle_p50_ms"] > 0
    assert len(prefill_s) == 3 and stats["offline_ttft_p50_ms"] == pytest.approx(np.median(prefill_s) * 1e3)
    assert llm.block_manager.num_hit_tokens == 0  # each pass computed every prompt
    llm.shutdown()
