"""One engine replica: completes batches of rows. Ray Data runs it as an actor (`map_batches` with this
class: one engine per actor, built once); the in-process path calls `complete` directly."""

from __future__ import annotations

from typing import Any

from nvllm.batch.rows import completed, prompt_of, row_sampling_params
from nvllm.config import EngineConfig
from nvllm.sampling_params import SamplingParams
from nvllm.tokenizer.chat import chat_prompts


class Replica:
    def __init__(
        self,
        config: EngineConfig,
        sampling_params: SamplingParams,
        chat_template_kwargs: dict | None = None,
    ):
        from nvllm.llm import LLM  # the engine's stack, in the actor that runs it

        self.llm = LLM.from_config(config)
        self.sampling_params = sampling_params
        self.chat_template_kwargs = chat_template_kwargs

    def complete(self, rows: list[dict]) -> list[dict]:
        """Each row with its completion, in order: the rows go through the engine in one `generate`."""
        prompts, params = [], []
        for row in rows:
            kind, prompt = prompt_of(row)
            if kind == "messages":
                [prompt] = chat_prompts(self.llm.tokenizer, [list(prompt)], self.chat_template_kwargs)
            prompts.append(prompt)
            params.append(row_sampling_params(row, self.sampling_params))
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [completed(row, output) for row, output in zip(rows, outputs, strict=True)]

    def __call__(self, batch: Any) -> Any:
        """Ray Data's call: a pyarrow table of rows in, the completed rows out."""
        import pyarrow

        return pyarrow.Table.from_pylist(self.complete(batch.to_pylist()))

    def shutdown(self) -> None:
        self.llm.shutdown()
