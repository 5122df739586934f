"""`LLM`, the offline API as vLLM's: built from a model name and flat overrides, it runs whole calls —
`generate`, `stream`, `chat` — on the engine it extends (nvllm/engine/llm_engine.py), each holding the
engine's lock from its first request to its last output (nvllm/engine/ownership.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from collections.abc import Sequence as SequenceLike
from typing import Any

from nvllm.config import EngineConfig
from nvllm.engine.config_resolution import engine_config
from nvllm.engine.generation_panel import GenerationPanel
from nvllm.engine.llm_engine import LLMEngine
from nvllm.engine.request_outputs import StreamCursor, attach_detokenizer, request_output
from nvllm.engine.request_validation import Prompt, paired, priorities, token_ids_of
from nvllm.outputs import CompletionOutput, RequestOutput
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.tokenizer.chat import chat_prompts


class LLM(LLMEngine):
    """`LLM(model=None | checkpoint dir | preset name, **overrides)`.

    Overrides take nano-vLLM's keyword names (`enforce_eager`, `tensor_parallel_size`, `kvcache_block_size`,
    `max_num_seqs`, ...) or any config key as `group__key` (`cache__enable_prefix_caching=False`).
    Use it as a context manager, or call `shutdown()`, to release the GPU memory and worker processes.
    """

    def __init__(self, model: str | None = None, **overrides: Any):
        super().__init__(engine_config(model, **overrides))

    @classmethod
    def from_config(cls, config: EngineConfig) -> LLM:
        llm = cls.__new__(cls)
        LLMEngine.__init__(llm, config)
        return llm

    def generate(
        self,
        prompts: Prompt | SequenceLike[Prompt],
        sampling_params: SamplingParams | SequenceLike[SamplingParams] | None = None,
        use_tqdm: bool = True,
        priority: int | SequenceLike[int] | None = None,
    ) -> list[RequestOutput]:
        """Generate for one prompt (a string, token ids, `{"prompt": ...}` or `{"prompt_token_ids": ...}`) or
        a list of them; one `RequestOutput` per prompt, in input order (`out["text"]`, `out["token_ids"]`:
        its first sample's). `sampling_params`: one for all (None: `SamplingParams()`) or one each.
        `priority`: one int per prompt (lower first under `scheduler.policy=priority`). All or nothing:
        every request is checked before any is queued. Calls from several threads run one after another."""
        with self._exclusive():
            self.profiler.generate_started()
            requests = self._checked(prompts, sampling_params, priority)
            try:
                samples = []
                for request in requests:
                    seq = self._enqueue(*request)
                    samples.append([seq, *seq.forks])
                self.profiler.lap("add_requests")
                self._run_until_done([seq for group in samples for seq in group], use_tqdm)
            finally:
                self._abort_all()
            outputs = [request_output(request_samples, self.tokenizer) for request_samples in samples]
            self.profiler.lap("detokenize")
            self.profiler.generate_finished()
            return outputs

    def stream(
        self,
        prompts: Prompt | SequenceLike[Prompt],
        sampling_params: SamplingParams | SequenceLike[SamplingParams] | None = None,
        priority: int | SequenceLike[int] | None = None,
    ) -> Iterator[tuple[int, CompletionOutput]]:
        """`generate`, yielding `(prompt index, delta)` as tokens reach the host: `delta.token_ids` and
        `delta.text` are the sample's (`delta.index`) new tokens and their text (never half a character, nor
        the start of a stop string that is cut: tokens wait with their text), `delta.finish_reason` is set on
        its last one. The deltas of a sample add up to its `generate` output. Leaving the loop early drops the
        remaining requests."""
        with self._exclusive(streaming=True):
            self.profiler.generate_started()
            requests = self._checked(prompts, sampling_params, priority)
            try:
                cursors = []
                for index, request in enumerate(requests):
                    seq = self._enqueue(*request)
                    for sample, member in enumerate((seq, *seq.forks)):
                        if member.detokenizer is None:
                            attach_detokenizer(member, self.tokenizer)
                        cursors.append((index, StreamCursor(member, sample)))
                while not self.is_finished():
                    self._step()
                    for index, cursor in cursors:
                        if (delta := cursor.delta()) is not None:
                            with self._ownership.stream_suspended():
                                yield index, delta
            finally:
                self._abort_all()
                self.profiler.generate_finished()

    def chat(
        self,
        messages: list[dict] | list[list[dict]],
        sampling_params: SamplingParams | SequenceLike[SamplingParams] | None = None,
        use_tqdm: bool = True,
        chat_template_kwargs: dict | None = None,
    ) -> list[RequestOutput]:
        """`generate` for one conversation (a list of `{"role", "content"}` messages) or a list of them,
        each rendered by the tokenizer's chat template with the assistant's turn opened
        (`chat_template_kwargs`, e.g. `{"enable_thinking": False}`, go to the template)."""
        prompts = chat_prompts(self.tokenizer, messages, chat_template_kwargs)
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    @contextlib.contextmanager
    def _exclusive(self, streaming: bool = False):
        """The engine for one generate or stream call (see EngineOwnership). Requests of a hand-written
        add_request/step loop are refused rather than run and dropped by this call. A stream's tokens are
        handed out step by step, so that each reaches it one model step after it is sampled
        (`LLMEngine.set_streaming`)."""
        with self._ownership.call():
            if not self.is_finished():
                raise RuntimeError(
                    "requests added with add_request() are pending: step them to the end or call abort_all() "
                    "before generate or stream"
                )
            if streaming:
                self.set_streaming(True)
            try:
                yield
            finally:
                self.set_streaming(False)

    def _checked(self, prompts, sampling_params, priority) -> list[tuple[list[int], SamplingParams, int]]:
        """The requests of a call as (token ids, params, priority), every one checked."""
        pairs = paired(prompts, sampling_params)
        requests = [
            (token_ids_of(prompt, self.tokenizer), params, rank)
            for (prompt, params), rank in zip(pairs, priorities(priority, len(pairs)))
        ]
        for token_ids, params, _ in requests:  # all checked before any is queued
            self.validate(token_ids, params)
        return requests

    def _run_until_done(self, seqs: list[Sequence], use_tqdm: bool) -> None:
        with GenerationPanel(self, seqs, enabled=use_tqdm) as panel:
            while not self.is_finished():
                self._step()
                panel.refresh()
