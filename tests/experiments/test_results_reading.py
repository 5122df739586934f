"""`nvllm summarize` and `nvllm compare` on what a sweep dir really holds: one repeat, a truncated
results.json, a re-run into the same dir; and the summary files they write."""

import json
import os
import stat
import subprocess
import sys

import pytest

from nvllm.cli import main as nvllm
from tests.helpers.experiment_utils import TINY


def write_job(directory, number: int, overrides: list[str], metrics: dict | None) -> None:
    """A job dir as Hydra and the harness leave it: its overrides, its number, its results (if done)."""
    hydra = directory / str(number) / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "overrides.yaml").write_text("".join(f"- {line}\n" for line in overrides))
    (hydra / "hydra.yaml").write_text(f"hydra:\n  job:\n    num: {number}\n")
    if metrics is not None:
        (hydra.parent / "results.json").write_text(json.dumps({"metrics": metrics}))


def one_repeat(rate: float) -> dict:
    return {
        "output_tok_per_s": rate,
        "output_tok_per_s_min": rate,
        "output_tok_per_s_max": rate,
        "repeats": 1,
    }


@pytest.fixture
def sweep_dir(tmp_path):
    sweep = tmp_path / "sweep"
    for number, (size, rate) in enumerate([(16, 100.0), (32, 120.0), (64, 90.0)]):
        write_job(sweep, number, [f"cache.block_size={size}"], one_repeat(rate))
    return sweep


def test_compare_with_one_repeat_says_it_has_no_spread_and_shows_the_ranges(sweep_dir, capsys):
    nvllm(["compare", str(sweep_dir / "0"), str(sweep_dir / "0")])
    out = capsys.readouterr().out
    assert "no spread" in out.split("| metric |")[0]  # said before the table
    assert "| output_tok_per_s | 100 [100, 100] | 100 [100, 100] | +0.0% | no spread |" in out
    nvllm(["compare", str(sweep_dir), str(sweep_dir)])
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.endswith("| +0.0% | no spread |") for line in lines) == 3


def test_summarize_with_another_metric_keeps_the_saved_summary_and_prints_the_table(sweep_dir, capsys):
    nvllm(["summarize", str(sweep_dir)])
    out = capsys.readouterr().out
    assert "| 1 | done | 32 | 120.00 | 120.00 | 120.00 | 1 |" in out  # the table itself, not only paths
    saved = (sweep_dir / "summary.md").read_text()
    nvllm(["summarize", str(sweep_dir), "--metric", "repeats"])
    out = capsys.readouterr().out
    assert (sweep_dir / "summary.md").read_text() == saved
    assert str(sweep_dir / "summary-metric-repeats.md") in out
    assert "| job | status | cache.block_size | repeats |" in out
    mask = os.umask(0o022)
    os.umask(mask)
    for path in sweep_dir.glob("summary*"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path


def test_a_truncated_results_file_is_named_and_its_job_marked(sweep_dir, capsys):
    broken = sweep_dir / "1" / "results.json"
    broken.write_text(broken.read_text()[:20])
    nvllm(["summarize", str(sweep_dir)])
    captured = capsys.readouterr()
    assert str(broken) in captured.err
    assert "| 1 | unreadable | 32 |" in captured.out
    assert "| 0 | done | 16 | 100.00 |" in captured.out  # the rest is summarised
    nvllm(["compare", str(sweep_dir), str(sweep_dir)])
    assert str(broken) in capsys.readouterr().err


def test_a_job_rerun_into_its_dir_that_fails_keeps_no_results_of_the_previous_run(tmp_path):
    run_dir = tmp_path / "run"
    write_job(tmp_path, 0, [], one_repeat(100.0))
    (tmp_path / "0").rename(run_dir)
    failing_runner = "runner._target_=builtins.divmod"  # any runner that fails once the job started
    command = [sys.executable, "-m", "nvllm", "run", *TINY, f"hydra.run.dir={run_dir}", failing_runner]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert not (run_dir / "results.json").exists()
