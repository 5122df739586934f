"""A row of a batch: what its prompt is (a `prompt` column, or a `messages` conversation) and what its
completion adds to it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from nvllm.outputs import RequestOutput
from nvllm.sampling_params import SamplingParams

ID_COLUMN = "id"
SAMPLING_COLUMN = "sampling_params"  # optional: a row's own fields over the batch's, as vLLM's Ray Data rows
PROMPT_COLUMNS = ("prompt", "messages")
OUTPUT_COLUMNS = ("text", "token_ids", "finish_reason", "num_prompt_tokens")


def check_columns(columns: Iterable[str], source: str) -> None:
    """A dataset nvllm can complete: a prompt column, and none of the columns its output adds."""
    columns = set(columns)
    if not columns & set(PROMPT_COLUMNS):
        raise ValueError(f"{source}: rows need a 'prompt' or a 'messages' column, found {sorted(columns)}")
    if clashing := sorted(columns & set(OUTPUT_COLUMNS)):
        raise ValueError(f"{source}: the columns {clashing} are what the output adds; rename them")


def prompt_of(row: dict) -> tuple[str, Any]:
    """('prompt', text or token ids) or ('messages', a conversation): the row's `prompt` when it has one,
    else its `messages` (a dataset may mix both kinds of row, each with the other column empty)."""
    if row.get("prompt") is not None:
        return "prompt", row["prompt"]
    if row.get("messages") is not None:
        return "messages", row["messages"]
    raise ValueError(f"row {row.get(ID_COLUMN)!r} has neither a prompt nor messages")


def row_sampling_params(row: dict, default: SamplingParams) -> SamplingParams:
    """The batch's sampling parameters with the row's `sampling_params` fields over them. A field the row
    leaves empty is None (a Parquet or Arrow column of structs has every key on every row): not set."""
    fields = {key: value for key, value in (row.get(SAMPLING_COLUMN) or {}).items() if value is not None}
    return dataclasses.replace(default, **fields) if fields else default


def completed(row: dict, output: RequestOutput) -> dict:
    """The row with its completion's columns (the first sample's)."""
    sample = output.outputs[0]
    return {
        **row,
        "text": sample.text,
        "token_ids": list(sample.token_ids),
        "finish_reason": sample.finish_reason,
        "num_prompt_tokens": len(output.prompt_token_ids),
    }
