"""What the HTTP app and its metrics need from the engine they serve, whichever serves it: `AsyncEngine` (a
thread of the server's process) or `EngineProcess` (a process of its own). Plain, picklable records cross
between them: the engine's gauges (`EngineStats`) and each ended request's counts and times
(`FinishedRequest`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from nvllm.engine.llm_engine import LLMEngine
from nvllm.engine.request_validation import Prompt
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence

ABORTED = "abort"  # the finish reason of a request dropped before it finished (vLLM's)


@dataclass(frozen=True)
class EngineStats:
    """The engine's state for /metrics' gauges."""

    running: int = 0
    waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    prefix_hit_rate: float = 0.0


def engine_stats(engine: LLMEngine) -> EngineStats:
    scheduler, blocks = engine.scheduler, engine.block_manager
    return EngineStats(
        running=len(scheduler.running),
        waiting=len(scheduler.waiting),
        kv_blocks_used=blocks.num_blocks - blocks.num_free_blocks,
        kv_blocks_total=blocks.num_blocks,
        prefix_hit_rate=blocks.prefix_hit_rate,
    )


@dataclass(frozen=True)
class SampleTimes:
    """One sample's tokens and times (`finished_time` None: it was aborted)."""

    num_completion_tokens: int
    arrival_time: float
    first_token_time: float | None
    finished_time: float | None


@dataclass(frozen=True)
class FinishedRequest:
    """A request that ended, as the metrics count it; `first_scheduled_time`: when a prefill step first took
    its prompt (None: never, or a server that does not say)."""

    num_prompt_tokens: int
    samples: tuple[SampleTimes, ...]
    first_scheduled_time: float | None = None

    @classmethod
    def of(cls, prompt_token_ids: list[int], samples: list[Sequence]) -> FinishedRequest:
        return cls(
            len(prompt_token_ids),
            tuple(
                SampleTimes(
                    seq.num_completion_tokens,
                    seq.arrival_time,
                    seq.first_token_time,
                    seq.finished_time if seq.finish_reason is not None else None,
                )
                for seq in samples
            ),
            samples[0].first_scheduled_time if samples else None,
        )

    @property
    def aborted(self) -> bool:
        return any(sample.finished_time is None for sample in self.samples)

    # A request's times, read from a finished (not aborted) one with samples: it arrived with its first
    # sample, its first token is its first sample's to have one, and it ended with its last sample.
    @property
    def arrival_time(self) -> float:
        return self.samples[0].arrival_time

    @property
    def first_token_time(self) -> float:
        return min(sample.first_token_time for sample in self.samples)

    @property
    def last_token_time(self) -> float:
        return max(sample.finished_time for sample in self.samples)

    @property
    def num_completion_tokens(self) -> int:
        return sum(sample.num_completion_tokens for sample in self.samples)


class ServedEngine(Protocol):
    """The engine as app.py serves it (see AsyncEngine for each method's contract)."""

    tokenizer: Any
    max_model_len: int

    @property
    def num_active(self) -> int: ...

    @property
    def failure(self) -> str | None:
        """Why the engine can serve no more (None while it can)."""

    def tokenize(self, prompt: Prompt) -> list[int]: ...

    async def add_request(
        self,
        prompt: Prompt,
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        streaming: bool = True,
    ) -> Any: ...

    def abort(self, request_id: str) -> asyncio.Future: ...

    def stats(self) -> EngineStats: ...

    def shutdown(self) -> None: ...
