"""A workload the engine would refuse is stopped before anything is built: every row of a lengths file
(type, range, against max_model_len), named by file and line, and random prompts longer than the model."""

import os
import subprocess
import sys

import pytest

from experiments.harness.workload import read_lengths
from experiments.runners import bench
from nvllm.run import compose_config
from tests.helpers.experiment_utils import SMALL_WORKLOAD, TINY

GOOD_ROW = '{"input_len": 5, "output_len": 3}\n'


@pytest.mark.parametrize(
    "row",
    [
        '{"input_len": true, "output_len": 3}',  # JSON's true is no length, though Python counts it 1
        '{"input_len": 1e400, "output_len": 3}',  # infinity
        '{"input_len": 5, "output_len": 2.5}',
        '{"input_len": 5, "output_len": -1}',
        '{"input_len": 5}',
        "[5, 3]",
        '{"input_len": 5, "output_len": 3',  # no JSON
    ],
)
def test_every_row_of_a_jsonl_file_is_checked_and_named_by_line(tmp_path, row):
    path = tmp_path / "lengths.jsonl"
    path.write_text(GOOD_ROW + "\n" + row + "\n" + GOOD_ROW)  # the bad row is on line 3
    with pytest.raises(ValueError, match=f"{path}, line 3"):
        read_lengths(str(path))


def test_a_csv_file_is_checked_by_line_and_against_the_model(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("input_len,output_len\n5,3\nTrue,3\n")
    with pytest.raises(ValueError, match=f"{path}, line 3"):
        read_lengths(str(path))
    path.write_text("input_len,output_len\n5,3\n64,3\n")
    assert read_lengths(str(path)) == [(5, 3), (64, 3)]
    with pytest.raises(ValueError, match=f"{path}, line 3: input_len=64 .*max_model_len=64"):
        read_lengths(str(path), max_model_len=64)


def test_a_lengths_file_longer_than_the_model_stops_the_job_before_the_engine(tmp_path):
    path = tmp_path / "lengths.jsonl"
    path.write_text(GOOD_ROW + '{"input_len": 100000, "output_len": 3}\n')
    overrides = ["workload=lengths_from_file", f"workload.lengths_file={path}"]
    with pytest.raises(ValueError, match=f"{path}, line 2: input_len=100000"):
        bench.run(compose_config(["+experiment=bench", *TINY, *overrides]), tmp_path / "job")
    assert not (tmp_path / "job").exists()


def test_a_prompt_longer_than_the_model_fails_in_one_line_with_no_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    too_long = ["scheduler.max_model_len=64", "workload.input_len=64"]
    command = [sys.executable, "-m", "nvllm", "run", "+experiment=bench", *TINY, *SMALL_WORKLOAD, *too_long]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*command, f"hydra.run.dir={run_dir}"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1 and not run_dir.exists()
    assert done.stderr.strip().splitlines() == [
        "Error: workload.input_len=64 leaves no room for output within scheduler.max_model_len=64 "
        "(prompt + output tokens): shorten the prompts or raise scheduler.max_model_len"
    ]
