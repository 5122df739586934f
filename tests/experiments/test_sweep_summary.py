"""A sweep end to end (through the `nvllm` command): its jobs, their quiet output, the summary over the
keys it varied with each job's spread, a summary rebuilt for an interrupted sweep, and comparisons."""

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from nvllm.cli import main as nvllm
from tests.helpers.experiment_utils import PNG_MAGIC, SMALL_WORKLOAD, TINY, run_file_holding, wandb_run_files

SWEPT = ["scheduler.num_decode_steps=1,4", "workload.temperature=0,0.6"]  # two keys of no special meaning


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 2 x 2 sweep with 2 repeats a job, run as a user runs it; the dir and the command's output."""
    sweep_dir = tmp_path_factory.mktemp("sweep") / "sweep"
    fixed = ["cache.block_size=16", "scheduler.max_num_batched_tokens=128", "workload.repeats=2"]
    command = [sys.executable, "-m", "nvllm", "run", "+experiment=sweep", *TINY, *SMALL_WORKLOAD, *fixed]
    command += [*SWEPT, f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return sweep_dir, done.stdout + done.stderr


def read_table(path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_a_sweep_summarises_the_keys_it_varies(sweep):
    sweep_dir, _ = sweep
    job_dirs = sorted(path for path in sweep_dir.iterdir() if path.name.isdigit())
    assert [path.name for path in job_dirs] == ["0", "1", "2", "3"]  # the command line narrowed the 3 x 4
    rows = read_table(sweep_dir / "summary.csv")
    assert list(rows[0])[:4] == ["job", "status", "scheduler.num_decode_steps", "workload.temperature"]
    assert "cache.block_size" not in rows[0]  # one value for every job: not a swept key
    for row in rows:
        job_dir = sweep_dir / row["job"]
        results = json.loads((job_dir / "results.json").read_text())
        overrides = {line.split("=")[0]: line.split("=")[1] for line in results["name"].split(",")}
        assert row["scheduler.num_decode_steps"] == overrides["scheduler.num_decode_steps"]
        metric = results["metrics"]["output_tok_per_s"]
        assert float(row["output_tok_per_s"]) == pytest.approx(metric) and row["status"] == "done"
        low, high = (float(row[f"output_tok_per_s_{end}"]) for end in ("min", "max"))
        assert low <= metric <= high and len(results["repeats"]) == 2
        data = run_file_holding(job_dir, str(sweep_dir).encode())  # the sweep as the job's wandb group
        assert str(sweep_dir).encode() in data
    header = (sweep_dir / "summary.md").read_text().splitlines()[0]
    assert "scheduler.num_decode_steps | workload.temperature | output_tok_per_s" in header
    assert (sweep_dir / "summary.png").read_bytes().startswith(PNG_MAGIC)
    # the summary run's config is what the sweep varied, not one job's values
    [summary_run] = wandb_run_files(sweep_dir)
    data = run_file_holding(sweep_dir, b"varied", b"scheduler.num_decode_steps", b"workload.temperature")
    assert b"varied" in data and b"workload.temperature" in data and summary_run.is_file()


def test_a_sweep_is_quiet(sweep):
    sweep_dir, output = sweep
    wandb_lines = [line for line in output.splitlines() if line.startswith("wandb:")]
    assert len(wandb_lines) == 5 and all(
        "offline run, upload with `wandb sync" in line for line in wandb_lines
    )
    assert output.count("Throughput, median of 2 repeats") == 4 and "Sweep summary of 4/4 jobs" in output


def test_summarize_an_interrupted_sweep(sweep, tmp_path, capsys):
    sweep_dir, _ = sweep
    copy = tmp_path / "interrupted"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("wandb", "summary.*"))
    (copy / "2" / "results.json").unlink()  # started, then failed or interrupted
    shutil.rmtree(copy / "3")  # never started
    nvllm(["summarize", str(copy), "--x", "workload.temperature", "--hue", "scheduler.num_decode_steps"])
    assert "Sweep summary of 2/4 jobs" in capsys.readouterr().out
    view = "summary-x-workload.temperature-hue-scheduler.num_decode_steps"  # beside the sweep's own summary
    status = {row["job"]: row["status"] for row in read_table(copy / f"{view}.csv")}
    assert status == {"0": "done", "1": "done", "2": "incomplete", "3": "missing"}
    assert "| 3 | missing | 4 | 0.6 |" in (copy / f"{view}.md").read_text()
    assert (copy / f"{view}.png").read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(SystemExit, match="cache.block_size"):
        nvllm(["summarize", str(copy), "--x", "cache.block_size"])  # not a key this sweep varies


def test_compare_two_runs_and_two_sweeps(sweep, capsys):
    sweep_dir, _ = sweep
    a, b = (json.loads((sweep_dir / job / "results.json").read_text())["metrics"] for job in ("0", "2"))
    nvllm(["compare", str(sweep_dir / "0"), str(sweep_dir / "2")])
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("| output_tok_per_s |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert (
        cells[1]
        == f"{a['output_tok_per_s']:.4g} [{a['output_tok_per_s_min']:.4g}, {a['output_tok_per_s_max']:.4g}]"
    )
    assert cells[2].startswith(f"{b['output_tok_per_s']:.4g} [")
    assert cells[3] == f"{(b['output_tok_per_s'] / a['output_tok_per_s'] - 1) * 100:+.1f}%"
    assert "| scheduler.num_decode_steps | 1 | 4 |" in table  # the config that differs
    nvllm(["compare", str(sweep_dir), str(sweep_dir)])
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.endswith("| +0.0% | yes |") for line in lines) == 4  # every job paired with itself


def test_the_command_lists_its_commands_and_refuses_unknown_ones(capsys, monkeypatch):
    with pytest.raises(SystemExit) as done:
        nvllm(["--help"])
    page = capsys.readouterr().out
    assert done.value.code == 0 and all(
        f"  {name} " in page for name in ("run", "summarize", "compare", "visualize")
    )
    with pytest.raises(SystemExit, match="unknown command 'sumarize'"):
        nvllm(["sumarize", "x"])
    with pytest.raises(SystemExit, match="neither a run's dir nor a sweep's"):
        nvllm(["summarize", "/nonexistent"])
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "nvllm.visualize" else real_find_spec(name, *a),
    )
    with pytest.raises(SystemExit, match="no visualizer"):
        nvllm(["visualize", "run_dir"])
