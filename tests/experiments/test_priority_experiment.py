"""`+experiment=priority` on a tiny model: one job per policy, latency per priority class."""

from experiments.runners import priority
from nvllm.run import compose_config
from tests.helpers.experiment_utils import SMALL_WORKLOAD, TINY

# eight requests (two of high priority) of up to 24 new tokens onto 8 blocks of 16 tokens
PRESSURE = [
    "workload.num_seqs=8",
    "workload.output_len=24",
    "workload.min_output_len=8",
    "cache.num_blocks=8",
]
QUIET = ["wandb.mode=disabled", "wandb.group=null"]


def test_priority_experiment_reports_each_class(tmp_path, capsys):
    results = {}
    for policy in ("fcfs", "priority"):
        overrides = ["+experiment=priority", *TINY, *SMALL_WORKLOAD, *PRESSURE, *QUIET]
        results[policy] = priority.run(
            compose_config([*overrides, f"scheduler.policy={policy}"]), tmp_path / policy
        )
        assert (tmp_path / policy / "results.json").is_file()
    printed = capsys.readouterr().out
    assert "scheduler.policy=priority" in printed and "high priority (2 requests)" in printed
    for metrics in results.values():
        assert metrics["num_high_priority"] == 2 and metrics["num_low_priority"] == 6
        assert 0 < metrics["ttft_high_mean_ms"] <= metrics["latency_high_mean_ms"]
        assert metrics["num_preemptions"] > 0  # the cache holds a few of the requests at once
    assert results["fcfs"]["output_tokens"] == results["priority"]["output_tokens"]
