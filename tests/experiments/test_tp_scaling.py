"""The tensor-parallel results table: its arithmetic on hand-made results, and a real run of tiny jobs."""

from __future__ import annotations

import json
import subprocess

from experiments.harness.config import engine_config_from_run_config
from experiments.studies import tp_scaling
from nvllm.run import compose_config


def write_job(directory, model: str, size: int, experiment: str, **metrics) -> None:
    job_dir = directory / tp_scaling.job_name(model, size, experiment)
    job_dir.mkdir(parents=True)
    config = {
        "runner": {"_target_": f"experiments.runners.{experiment}.run"},
        "model": {"name": model},
        "parallel": {"tensor_parallel_size": size},
    }
    (job_dir / "results.json").write_text(json.dumps({"config": config, "metrics": metrics}))


def test_speedup_and_efficiency_are_against_the_models_smallest_tp_size(tmp_path):
    for size, tok_per_s in [(1, 1000.0), (2, 1700.0), (4, 2800.0)]:
        write_job(tmp_path / "first", "qwen3-8b", size, "bench", output_tok_per_s=tok_per_s, startup_s=100.0)
    for size, tok_per_s in [(2, 500.0), (4, 900.0)]:
        write_job(tmp_path / "later", "qwen3-32b", size, "bench", output_tok_per_s=tok_per_s, startup_s=200.0)
    latency = dict(output_tok_per_s=150.0, token_latency_p50_ms=6.5, time_to_first_token_ms=40.0)
    write_job(tmp_path / "later", "qwen3-8b", 2, "latency", **latency)
    rows = tp_scaling.table(tp_scaling.read_results([tmp_path / "first", tmp_path / "later"])).splitlines()
    assert len(rows) == 2 + 5
    cells = {tuple(row.split(" | ")[:2]): row.split(" | ") for row in rows[2:]}
    assert cells[("| qwen3-8b", "2")][2:9] == ["1,700", "1.70×", "85%", "150.0", "6.50", "40.0", "100.0 |"]
    assert cells[("| qwen3-8b", "4")][2:5] == ["2,800", "2.80×", "70%"]
    assert cells[("| qwen3-32b", "2")][2:5] == ["500", "1.00×", "100%"]
    assert cells[("| qwen3-32b", "4")][2:5] == ["900", "1.80×", "90%"]


def test_jobs_compose_the_named_experiment_and_tp_size_on_random_weights(tmp_path):
    for experiment in tp_scaling.EXPERIMENTS:
        command = tp_scaling.job_command("qwen3-32b", 4, experiment, tmp_path, ["scheduler.max_num_seqs=64"])
        assert command[1:3] == ["-m", "nvllm.run"] and command[-2] == f"hydra.run.dir={tmp_path}"
        cfg = compose_config([*command[3:-2], command[-1]])
        config = engine_config_from_run_config(cfg)
        assert cfg.runner._target_ == f"experiments.runners.{experiment}.run"
        assert config.model.name == "qwen3-32b" and config.model.path is None
        assert config.parallel.tensor_parallel_size == 4 and config.scheduler.max_num_seqs == 64


def test_run_skips_finished_jobs_and_goes_on_after_a_failed_one(tmp_path, monkeypatch, capsys):
    write_job(tmp_path, "qwen3-8b", 1, "bench", output_tok_per_s=1000.0, startup_s=90.0)
    commands = []

    def fake_run(command, timeout):
        commands.append(command)
        return subprocess.CompletedProcess(command, returncode=1)

    monkeypatch.setattr(subprocess, "run", fake_run)
    tp_scaling.main(["run", str(tmp_path), "qwen3-8b:1,2", "--experiments", "bench"])
    assert [command[5] for command in commands] == ["parallel=tp2"]
    captured = capsys.readouterr()
    assert "qwen3-8b-tp2-bench failed (1)" in captured.err and "| qwen3-8b | 1 | 1,000 |" in captured.out
