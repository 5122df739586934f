"""Batch inference on a local Ray of 2 CPUs: 48 prompts through 2 CPU replicas give every id once with the
tokens of one in-process engine; with a replica killed mid-run and part of the output already done, still
every row exactly once, the done rows skipped."""

import os

import pytest

from nvllm.batch import generate_dataset, run_batch
from nvllm.batch.files import OutputDir
from tests.helpers.batch_utils import (
    CRASH_MARKER_ENV,
    GREEDY,
    CrashOnce,
    in_process_tokens,
    prompt_rows,
    tiny_config,
    write_jsonl,
)

ray = pytest.importorskip("ray")
NUM_ROWS = 48


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    marker = tmp_path_factory.mktemp("crash") / "crashed"
    os.environ[CRASH_MARKER_ENV] = str(marker)  # before ray.init: the actors inherit the environment
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield marker
    ray.shutdown()
    del os.environ[CRASH_MARKER_ENV]


@pytest.fixture(scope="module")
def rows():
    return prompt_rows(NUM_ROWS)


@pytest.fixture(scope="module")
def oracle(rows):
    return in_process_tokens(rows)


def test_two_replicas_give_every_row_once_with_the_in_process_tokens(local_ray, rows, oracle, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    summary = run_batch(source, tmp_path / "out", tiny_config(), GREEDY, replicas=2, batch_size=8)
    assert (summary.on_ray, summary.rows_written, summary.rows_skipped) == (True, NUM_ROWS, 0)
    written = OutputDir(tmp_path / "out", "jsonl").rows()
    assert sorted(row["id"] for row in written) == list(range(NUM_ROWS))
    by_id = {row["id"]: row for row in written}
    assert [by_id[index]["token_ids"] for index in range(NUM_ROWS)] == oracle
    assert all(by_id[index]["topic"] == row["topic"] for index, row in enumerate(rows))
    assert summary.output_tokens == NUM_ROWS * GREEDY.max_tokens


def test_a_killed_replica_and_a_resumed_run_still_give_every_row_once(local_ray, rows, oracle, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    done = OutputDir(tmp_path / "out", "jsonl")
    done.write([{"id": index, "token_ids": oracle[index]} for index in range(10)])  # an earlier run's rows
    summary = run_batch(
        source, tmp_path / "out", tiny_config(), GREEDY, replicas=2, batch_size=6, replica_class=CrashOnce
    )
    assert local_ray.exists()  # a replica's process did die
    assert (summary.rows_skipped, summary.rows_written) == (10, NUM_ROWS - 10)
    written = OutputDir(tmp_path / "out", "jsonl").rows()
    assert sorted(row["id"] for row in written) == list(range(NUM_ROWS))
    assert all(row["token_ids"] == oracle[row["id"]] for row in written)


def test_the_python_api_maps_a_ray_dataset(local_ray, rows, oracle):
    dataset = ray.data.from_items(rows[:8])
    completed = generate_dataset(dataset, tiny_config(), GREEDY, replicas=1, batch_size=4).take_all()
    assert sorted(row["topic"] for row in completed) == sorted(row["topic"] for row in rows[:8])
    by_topic = {row["topic"]: list(row["token_ids"]) for row in completed}
    assert [by_topic[row["topic"]] for row in rows[:8]] == oracle[:8]
