"""The shared-prefix workload and experiment: the peer comparison's requests, and what the runner reports."""

import random

import pytest

from experiments.harness.config import workload_config
from experiments.harness.workload import make_requests
from experiments.runners import shared_prefix
from nvllm.run import compose_config

TINY = ["model=tiny", "compile=eager", "cache.block_size=16", "cache.num_blocks=256", "wandb.mode=disabled"]


def peer_prefix_workload(prefix_len, prefixes, reqs, suffix, out_min, out_max):
    """What the peer comparison's `prefix` workload draws (its script, restated)."""
    rng = random.Random(0)
    heads = [[rng.randint(0, 10000) for _ in range(prefix_len)] for _ in range(prefixes)]
    prompts = [
        head + [rng.randint(0, 10000) for _ in range(rng.randint(16, suffix))]
        for head in heads
        for _ in range(reqs)
    ]
    return prompts, [rng.randint(out_min, out_max) for _ in prompts]


@pytest.mark.parametrize(
    "overrides, peer",
    [
        ([], (1536, 1, 384, 128, 64, 512)),
        (
            [
                "workload.num_prefixes=8",
                "workload.num_seqs=512",
                "workload.prefix_len=1024",
                "workload.output_len=256",
            ],
            (1024, 8, 64, 128, 64, 256),
        ),
    ],
)
def test_workload_draws_the_peer_comparisons_requests(overrides, peer):
    cfg = compose_config(["+experiment=shared_prefix", *overrides])
    prompts, params = make_requests(workload_config(cfg), vocab_size=151936)
    expected_prompts, expected_lengths = peer_prefix_workload(*peer)
    assert prompts == expected_prompts
    assert [p.max_tokens for p in params] == expected_lengths
    assert all(p.temperature == 0.6 and p.ignore_eos for p in params)


def test_interleaved_prefixes_take_turns():
    cfg = compose_config(
        [
            *TINY,
            "workload=shared_prefix",
            "workload.num_prefixes=2",
            "workload.num_seqs=4",
            "workload.prefix_len=5",
            "workload.interleave_prefixes=true",
        ]
    )
    prompts, _ = make_requests(workload_config(cfg), vocab_size=4096)
    assert [prompt[:5] for prompt in prompts[:2]] != [prompts[0][:5]] * 2
    assert prompts[0][:5] == prompts[2][:5] and prompts[1][:5] == prompts[3][:5]


def test_bad_shared_prefix_settings_are_refused():
    cfg = compose_config(["workload=shared_prefix", "workload.num_prefixes=5"])
    with pytest.raises(ValueError, match="num_prefixes=5 must be 0"):
        workload_config(cfg)


def test_runner_reports_prefill_computed_and_kv_read(capsys, tmp_path):
    cfg = compose_config(
        [
            "+experiment=shared_prefix",
            *TINY,
            "attention.cascade=on",
            "workload.num_seqs=6",
            "workload.prefix_len=40",
            "workload.input_len=6",
            "workload.min_input_len=2",
            "workload.output_len=5",
            "workload.min_output_len=3",
        ]
    )
    metrics = shared_prefix.run(cfg, tmp_path)
    prompts, _ = make_requests(workload_config(cfg), vocab_size=151936)  # the tiny model's
    # the prefix computed once: its 2 full blocks are cache hits for the other five
    assert metrics["prefill_tokens_computed"] == sum(len(p) for p in prompts) - 5 * 32
    read, plain = metrics["kv_bytes_per_decode_token"], metrics["kv_bytes_per_decode_token_plain"]
    # six rows, each reading the 32 shared tokens: by cascade, the group reads them once per step
    assert read < plain
    assert "Prefill tokens computed" in capsys.readouterr().out


def test_kv_read_is_counted_in_the_cache_dtype(tmp_path):
    def plain_bytes(cache_dtype: str) -> float:
        cfg = compose_config(
            ["+experiment=shared_prefix", *TINY, f"cache.dtype={cache_dtype}", "workload.num_seqs=4"]
            + ["workload.prefix_len=40", "workload.input_len=6", "workload.min_input_len=2"]
            + ["workload.output_len=4", "workload.min_output_len=2"]
        )
        return shared_prefix.run(cfg, tmp_path / cache_dtype)["kv_bytes_per_decode_token_plain"]

    # the same lengths read either way; an fp8 cache holds a byte an element, the tiny model's fp32 four
    assert plain_bytes("auto") == 4 * plain_bytes("fp8") > 0
