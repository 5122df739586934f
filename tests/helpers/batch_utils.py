"""What the batch tests share: a tiny CPU engine's config, a file of rows, replicas that fail on purpose."""

from __future__ import annotations

import json
import os
from pathlib import Path

from nvllm import LLM, SamplingParams
from nvllm.batch import Replica
from nvllm.engine.config_resolution import engine_config
from tests.helpers.engine_utils import SMALL_CPU_KV_CACHE, TINY_VOCAB_SIZE, random_prompt

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
CRASH_MARKER_ENV = "NVLLM_TEST_CRASH_MARKER"  # set before ray.init: the actors inherit it


def tiny_config(vocab_size: int = TINY_VOCAB_SIZE):
    """The tiny CPU engine; its small vocabulary takes random-token prompts, the full one takes text."""
    return engine_config(
        "tiny",
        enforce_eager=True,
        model__vocab_size=vocab_size,
        device="cpu",
        kvcache_block_size=16,
        **SMALL_CPU_KV_CACHE,
    )


def prompt_rows(count: int) -> list[dict]:
    """Rows of random-token prompts of varied lengths, each with a column the output must carry through."""
    return [
        {"prompt": random_prompt(4 + index % 9, seed=index), "topic": f"topic-{index}"}
        for index in range(count)
    ]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def in_process_tokens(rows: list[dict], params: SamplingParams = GREEDY) -> list[list[int]]:
    """The oracle: every row's tokens from one engine in this process, all prompts in one generate."""
    with LLM.from_config(tiny_config()) as llm:
        outputs = llm.generate([row["prompt"] for row in rows], params, use_tqdm=False)
    return [output["token_ids"] for output in outputs]


class CrashOnce(Replica):
    """Kills its actor's process in the middle of its first batch, once across all actors (the marker file
    of $NVLLM_TEST_CRASH_MARKER is created by the one that dies)."""

    def complete(self, rows: list[dict]) -> list[dict]:
        try:
            os.close(os.open(os.environ[CRASH_MARKER_ENV], os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return super().complete(rows)
        os._exit(1)


class StopAfter(Replica):
    """Completes `batches` batches, then stops the run as Ctrl-C would."""

    batches = 2

    def complete(self, rows: list[dict]) -> list[dict]:
        if self.batches == 0:
            raise KeyboardInterrupt
        self.batches -= 1
        return super().complete(rows)
