"""What makes a measurement trustworthy: repeats on fresh requests with their spread, the provenance
recorded beside them, the CPU threads an experiment sets, and a bad config stopped before any file."""

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import torch
import transformers
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from experiments.harness.checks import ConfigCheck
from experiments.harness.config import workload_config
from experiments.harness.provenance import available_cores
from experiments.harness.threads import thread_choice
from experiments.harness.workload import make_requests, read_lengths
from experiments.runners import bench, generate
from nvllm.run import CONF_DIR, compose_config
from tests.helpers.experiment_utils import SMALL_WORKLOAD, TINY, run_file_holding

REPO = Path(__file__).resolve().parents[2]
QUIET_ENV = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()


def test_repeats_run_on_fresh_requests_and_report_their_spread(tmp_path):
    cfg = compose_config(["+experiment=bench", *TINY, *SMALL_WORKLOAD, "workload.repeats=3"])
    metrics = bench.run(cfg, tmp_path, name="repeats")
    results = json.loads((tmp_path / "results.json").read_text())
    per_repeat = results["repeats"]
    assert len(per_repeat) == 3 and results["metrics"]["repeats"] == 3
    workload = workload_config(cfg)
    for repeat, measured in enumerate(per_repeat):
        _, params = make_requests(workload, vocab_size=10_001, repeat=repeat)
        assert measured["output_tokens"] == sum(p.max_tokens for p in params)  # the repeat's own draw
    for name in ("output_tok_per_s", "prefill_tok_per_s", "decode_tok_per_s", "wall_s"):
        values = sorted(measured[name] for measured in per_repeat)
        assert (metrics[f"{name}_min"], metrics[name], metrics[f"{name}_max"]) == tuple(values)  # 3: median
    # fresh draws: no repeat's prompts hit the KV blocks another left in the prefix cache
    assert metrics["prefix_cache_hit_rate_max"] == 0
    prompts = [make_requests(workload, vocab_size=10_001, repeat=repeat)[0] for repeat in range(3)]
    assert prompts[0] == make_requests(workload, vocab_size=10_001)[0]  # repeat 0: the seed's own requests
    assert len({str(p) for p in prompts}) == 3


def test_repeats_default_by_device_and_refuse_replayed_text_prompts(tmp_path):
    assert workload_config(compose_config(["+experiment=bench"])).repeats is None  # by device: see below
    from experiments.harness.config import resolved_repeats

    bench_workload = workload_config(compose_config(["+experiment=bench"]))
    assert resolved_repeats(bench_workload, "cuda") >= 3 and resolved_repeats(bench_workload, "cpu") == 1
    cfg = compose_config([*TINY, "workload.repeats=2"])  # the demo's text prompts
    with pytest.raises(ValueError, match="workload.repeats=2 with text prompts"):
        generate.run(cfg, tmp_path)
    assert not any(tmp_path.iterdir())


def test_provenance_names_the_code_libraries_device_and_time(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the source of the thread count it must record
    before = datetime.now(timezone.utc).replace(microsecond=0)
    cfg = compose_config([*TINY, "workload.num_seqs=1", "workload.output_len=2"])
    generate.run(cfg, tmp_path, name="provenance")
    facts = json.loads((tmp_path / "results.json").read_text())["provenance"]
    assert facts["git_commit"] == git("rev-parse", "HEAD") and len(facts["git_commit"]) == 40
    assert facts["git_dirty"] == bool(git("status", "--porcelain", "--untracked-files=no"))
    assert facts["nvllm_path"] == str(REPO / "nvllm")
    assert (
        facts["torch_version"] == torch.__version__
        and facts["transformers_version"] == transformers.__version__
    )
    assert "flash_attn_version" in facts and "triton_version" in facts  # None where not installed
    assert facts["device"] == "cpu" and facts["device_name"] and facts["cuda_device_count"] == 0
    assert facts["host_cpu_count"] == os.cpu_count() and facts["available_cores"] == available_cores()
    assert facts["torch_threads"] >= 1 and facts["torch_threads_from"] == "OMP_NUM_THREADS"
    assert before <= datetime.fromisoformat(facts["time_utc"]) <= before + timedelta(minutes=5)
    data = run_file_holding(tmp_path, b"provenance", facts["git_commit"].encode())
    assert b"provenance" in data and facts["git_commit"].encode() in data  # the wandb config holds it too


def test_provenance_says_when_nvllm_is_no_checkout(tmp_path, monkeypatch):
    import nvllm
    from experiments.harness import provenance

    fake = tmp_path / "site-packages" / "nvllm" / "__init__.py"
    fake.parent.mkdir(parents=True)
    fake.touch()
    monkeypatch.setattr(nvllm, "__file__", str(fake))
    facts = provenance.code_version()
    assert facts["git_commit"] is None and facts["git_dirty"] is None and facts["nvllm_version"]


def test_threads_are_the_available_cores_unless_the_user_chose(monkeypatch, tmp_path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert thread_choice(None, "cpu") == (available_cores(), "available cores")
    assert thread_choice(None, "cuda") == (None, "torch default")
    assert thread_choice(3, "cpu") == (3, "cpu_threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert thread_choice(None, "cpu") == (None, "OMP_NUM_THREADS")
    with pytest.raises(ValueError, match="cpu_threads=0"):
        thread_choice(0, "cpu")
    monkeypatch.delenv("OMP_NUM_THREADS")
    threads_before = torch.get_num_threads()
    cfg = compose_config([*TINY, "wandb.mode=disabled", "workload.num_seqs=1", "workload.output_len=2"])
    generate.run(cfg, tmp_path)
    facts = json.loads((tmp_path / "results.json").read_text())["provenance"]
    assert (facts["torch_threads"], facts["torch_threads_from"]) == (available_cores(), "available cores")
    assert torch.get_num_threads() == threads_before  # restored: jobs and tests share the process
    generate.run(
        compose_config([*TINY, "wandb.mode=disabled", "cpu_threads=1", "workload.num_seqs=1"]), tmp_path
    )
    facts = json.loads((tmp_path / "results.json").read_text())["provenance"]
    assert (facts["torch_threads"], facts["torch_threads_from"]) == (1, "cpu_threads")


def test_a_bad_engine_config_stops_before_any_file(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match="CUDA is not available"):
        bench.run(compose_config([*TINY, "device=cuda"]), tmp_path / "job")
    assert not (tmp_path / "job").exists()
    # a sweep: every job is checked before the sweeper makes the sweep dir
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["model=tiny"], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.sweeper.params = {"attention": "torch,flash_attn"}
            cfg.hydra.overrides.task = ["model=tiny"]
        with pytest.raises(SystemExit):
            ConfigCheck().on_multirun_start(cfg, config_name="config")
    # from the command line: the run's dir is never created
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "nvllm.run", "model=tiny", "device=cuda", f"hydra.run.dir={run_dir}"]
    done = subprocess.run(command, env=QUIET_ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "CUDA is not available" in done.stderr and not run_dir.exists()


def test_lengths_from_a_file(tmp_path):
    (tmp_path / "lengths.csv").write_text("input_len,output_len\n5,3\n12,7\n")
    (tmp_path / "lengths.jsonl").write_text(
        '{"input_len": 5, "output_len": 3}\n{"input_len": 12, "output_len": 7}\n'
    )
    for name in ("lengths.csv", "lengths.jsonl"):
        assert read_lengths(str(tmp_path / name)) == [(5, 3), (12, 7)]
        workload = workload_config(
            compose_config(["workload=lengths_from_file", f"workload.lengths_file={tmp_path / name}"])
        )
        prompts, params = make_requests(workload, vocab_size=1000)
        pairs = [(len(prompt), p.max_tokens) for prompt, p in zip(prompts, params)]
        assert len(pairs) == 256 and set(pairs) == {(5, 3), (12, 7)}
        assert make_requests(workload, 1000, repeat=1)[0] != prompts  # fresh tokens in every repeat
    example = workload_config(compose_config(["workload=lengths_from_file"]))  # the example beside the YAML
    assert len(read_lengths(example.lengths_file)) == 100
    (tmp_path / "bad.jsonl").write_text(
        '{"input_len": 5, "output_len": 3}\n{"input_len": 0, "output_len": 2}\n'
    )
    with pytest.raises(ValueError, match="line 2"):
        read_lengths(str(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match="no such file"):
        read_lengths(str(tmp_path / "absent.csv"))
