"""Batch inference without Ray: the input's ids, the output's part files, a run stopped and resumed, and
the batch experiment run in-process when Ray is not installed."""

import json
import sys

import pytest

from experiments.runners.batch import run as run_batch_experiment
from nvllm import LLM
from nvllm.batch import run_batch
from nvllm.batch.files import OutputDir, read_input
from nvllm.run import compose_config
from tests.helpers.batch_utils import (
    GREEDY,
    StopAfter,
    in_process_tokens,
    prompt_rows,
    tiny_config,
    write_jsonl,
)
from tests.helpers.engine_utils import TINY_VOCAB_SIZE
from tests.helpers.experiment_utils import TINY

QWEN_VOCAB_SIZE = 151936


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError


def test_rows_get_their_position_as_id_unless_they_have_one(tmp_path):
    rows = read_input(write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}, {"prompt": "b", "x": 1}]))
    assert rows == [{"id": 0, "prompt": "a"}, {"id": 1, "prompt": "b", "x": 1}]
    own = read_input(write_jsonl(tmp_path / "own.jsonl", [{"id": "q7", "prompt": "a"}]))
    assert own == [{"id": "q7", "prompt": "a"}]


@pytest.mark.parametrize(
    "rows, problem",
    [
        ([{"text": "a"}], "'prompt' or a 'messages' column"),
        ([{"prompt": "a", "token_ids": [1]}], "what the output adds"),
        ([{"id": 1, "prompt": "a"}, {"id": 1, "prompt": "b"}], "id 1 is on more than one row"),
        ([{"id": 1, "prompt": "a"}, {"prompt": "b"}], "1 of 2 rows have no id"),
        ([], "holds no rows"),
    ],
)
def test_a_bad_input_is_refused_by_name(tmp_path, rows, problem):
    with pytest.raises(ValueError, match=problem):
        read_input(write_jsonl(tmp_path / "in.jsonl", rows))


def test_a_line_that_is_no_json_is_named(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(ValueError, match="line 2: no JSON"):
        read_input(tmp_path / "in.jsonl")


def test_parts_are_written_whole_and_read_back(tmp_path):
    output = OutputDir(tmp_path / "out", "jsonl")
    output.write([{"id": 0, "text": "a"}])
    output.write([{"id": 1, "text": "b"}, {"id": 2, "text": "c"}])
    assert output.done_ids() == {0, 1, 2} and len(output.parts()) == 2
    assert not list((tmp_path / "out").glob(".*"))  # no temporary file left
    OutputDir(tmp_path / "out", "jsonl").write([{"id": 3, "text": "d"}])  # another run, the same second
    assert output.done_ids() == {0, 1, 2, 3}


def test_a_stopped_run_resumed_writes_only_the_missing_rows(tmp_path, no_ray, capsys):
    rows = prompt_rows(12)
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    with pytest.raises(KeyboardInterrupt):
        run_batch(source, tmp_path / "out", tiny_config(), GREEDY, batch_size=4, replica_class=StopAfter)
    assert len(OutputDir(tmp_path / "out", "jsonl").done_ids()) == 8  # two batches of 4, then stopped
    summary = run_batch(source, tmp_path / "out", tiny_config(), GREEDY, batch_size=4)
    assert (summary.rows_skipped, summary.rows_written, summary.on_ray) == (8, 4, False)
    assert "8 of 12 rows already in" in capsys.readouterr().out
    written = OutputDir(tmp_path / "out", "jsonl").rows()
    assert sorted(row["id"] for row in written) == list(range(12))  # each once
    by_id = {row["id"]: row for row in written}
    oracle = in_process_tokens(rows)
    for index, row in enumerate(rows):
        assert by_id[index]["token_ids"] == oracle[index] and by_id[index]["topic"] == row["topic"]
        assert by_id[index]["num_prompt_tokens"] == len(row["prompt"])
        assert by_id[index]["finish_reason"] == "length"


def test_replicas_without_ray_are_refused(tmp_path, no_ray):
    source = write_jsonl(tmp_path / "in.jsonl", prompt_rows(2))
    with pytest.raises(ValueError, match="batch.replicas=2 needs Ray"):
        run_batch(source, tmp_path / "out", tiny_config(), GREEDY, replicas=2)


def test_the_experiment_runs_in_process_without_ray(tmp_path, no_ray):
    rows = prompt_rows(5)
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    overrides = [
        "+experiment=batch",
        *TINY,
        f"model.vocab_size={TINY_VOCAB_SIZE}",
        "device=cpu",
        f"batch.input={source}",
        f"batch.output={tmp_path / 'out'}",
        "batch.format=parquet",
        "batch.sampling.temperature=0",
        "batch.sampling.max_tokens=6",
        "batch.sampling.ignore_eos=true",
    ]
    metrics = run_batch_experiment(compose_config(overrides), tmp_path / "job", "batch-test")
    results = json.loads((tmp_path / "job" / "results.json").read_text())
    assert results["metrics"]["rows_written"] == 5 and results["metrics"]["on_ray"] is False
    assert metrics["output_tokens"] == 5 * 6 and results["provenance"]["device"] == "cpu"
    written = {row["id"]: row for row in OutputDir(tmp_path / "out", "parquet").rows()}
    assert [written[index]["token_ids"] for index in range(5)] == in_process_tokens(rows)


def test_a_chat_row_is_rendered_by_the_chat_template(tmp_path, no_ray):
    messages = [{"role": "user", "content": "Say hi."}]
    rows = [{"id": "chat", "messages": messages}, {"id": "p", "prompt": "Hi"}]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    config = tiny_config(vocab_size=QWEN_VOCAB_SIZE)  # text prompts: the tokenizer's whole vocabulary
    run_batch(source, tmp_path / "out", config, GREEDY)
    written = {row["id"]: row for row in OutputDir(tmp_path / "out", "jsonl").rows()}
    with LLM.from_config(config) as llm:
        [chat] = llm.chat([messages], GREEDY, use_tqdm=False)
        [plain] = llm.generate(["Hi"], GREEDY, use_tqdm=False)
    assert written["chat"]["token_ids"] == chat["token_ids"] and written["chat"]["messages"] == messages
    assert written["p"]["token_ids"] == plain["token_ids"]


def test_a_row_may_set_its_own_sampling_params(tmp_path, no_ray):
    rows = [{**row, "sampling_params": {"max_tokens": 2 + index}} for index, row in enumerate(prompt_rows(3))]
    rows[0]["sampling_params"] = {"max_tokens": None}  # an Arrow struct's empty field: the batch's value
    run_batch(write_jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out", tiny_config(), GREEDY)
    written = {row["id"]: row for row in OutputDir(tmp_path / "out", "jsonl").rows()}
    assert [len(written[index]["token_ids"]) for index in range(3)] == [GREEDY.max_tokens, 3, 4]
    with pytest.raises(ValueError, match="max_tokens"):
        run_batch(
            write_jsonl(tmp_path / "bad.jsonl", [{"prompt": [1, 2], "sampling_params": {"max_tokens": 0}}]),
            tmp_path / "bad",
            tiny_config(),
            GREEDY,
        )
