"""A ShareGPT-format workload, read as vLLM's serving benchmark reads one: a JSON list of
`{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}` records, each
giving one request: its first human turn is the prompt, and the token length of the first gpt turn after it
is the request's output length. Both are tokenized with the engine's tokenizer; a conversation whose
prompt and output together do not fit `max_model_len` is skipped and counted, as is one without such a
pair of turns."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvllm.tokenizer.tokenizer import Tokenizer


@dataclass(frozen=True)
class ShareGPTPool:
    """The requests a ShareGPT file gives an engine, and what was skipped."""

    requests: list[tuple[list[int], int]]  # (prompt token ids, output length)
    num_skipped_too_long: int  # prompt + output longer than max_model_len
    num_skipped_incomplete: int  # no human turn answered by a non-empty gpt turn

    def counts(self) -> dict[str, int]:
        return {
            "sharegpt_conversations_used": len(self.requests),
            "sharegpt_skipped_too_long": self.num_skipped_too_long,
            "sharegpt_skipped_incomplete": self.num_skipped_incomplete,
        }

    def draw(self, count: int, rng: random.Random) -> list[tuple[list[int], int]]:
        """`count` different requests (all of them, shuffled, where the pool holds fewer)."""
        return rng.sample(self.requests, min(count, len(self.requests)))


def check_sharegpt_file(name: str) -> Path:
    path = Path(name).expanduser()
    if not path.is_file():
        raise ValueError(f"workload.sharegpt_file={name!r}: no such file (relative to the working directory)")
    return path


def _first_exchange(record: Any) -> tuple[str, str] | None:
    """The first human turn's text and the text of the first gpt turn after it, if both are there."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list):
        return None
    senders = [turn.get("from") if isinstance(turn, dict) else None for turn in turns]
    if "human" not in senders or "gpt" not in senders[senders.index("human") :]:
        return None
    human = senders.index("human")
    prompt, answer = turns[human].get("value"), turns[senders.index("gpt", human)].get("value")
    if not (isinstance(prompt, str) and isinstance(answer, str) and prompt and answer):
        return None
    return prompt, answer


def read_sharegpt(name: str, tokenizer: Tokenizer, max_model_len: int) -> ShareGPTPool:
    """The file's requests for an engine of `max_model_len` with `tokenizer`; a ValueError names a file
    that is not a JSON list or holds no request that fits."""
    path = check_sharegpt_file(name)
    try:
        records = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"workload.sharegpt_file={str(path)!r} is no JSON: {error}") from None
    if not isinstance(records, list):
        raise ValueError(f"workload.sharegpt_file={str(path)!r} must hold a JSON list of conversations")
    requests, too_long, incomplete = [], 0, 0
    for record in records:
        exchange = _first_exchange(record)
        if exchange is None:
            incomplete += 1
            continue
        prompt = tokenizer.encode(exchange[0], add_special_tokens=False)
        output_len = len(tokenizer.encode(exchange[1], add_special_tokens=False))
        if not prompt or not output_len:
            incomplete += 1
        elif len(prompt) + output_len > max_model_len:
            too_long += 1
        else:
            requests.append((prompt, output_len))
    if not requests:
        raise ValueError(
            f"workload.sharegpt_file={str(path)!r}: none of its {len(records)} conversations gives a request "
            f"that fits scheduler.max_model_len={max_model_len} ({too_long} too long, {incomplete} without a "
            "human turn answered by a gpt turn)"
        )
    return ShareGPTPool(requests, too_long, incomplete)
