from __future__ import annotations

import itertools
import time
from enum import Enum, auto

import torch

from nvllm.sampling_params import SamplingParams


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    """One request: its tokens and where they are. Lengths, by where the tokens are:
    - `host_len`: tokens the host has (`token_ids`);
    - `device_len`: tokens the device has or will have once the launched rounds have run (the host's,
      plus the ones those rounds sample: their positions, KV slots and token limits are planned with them);
    - `computed_len`: leading tokens whose K/V finished steps wrote into the cache (cache hits included);
    - `cached_len`: of those, the ones the prefix cache held at admission.

    Each field set after construction has one writer, named beside it (a test holds this): `BlockManager`
    (where the KV is), `SequenceLifecycle` (status), `TokenRows`, `Postprocessor` (tokens back from the
    device), the sampler's request processing, the engine's detokenizer and its structured outputs."""

    _ids = itertools.count()

    def __init__(
        self,
        token_ids: list[int],
        sampling_params: SamplingParams,
        priority: int = 0,
        forks: list[Sequence] | None = None,
    ):
        self.seq_id = next(Sequence._ids)  # also its arrival order
        self.priority = priority  # lower is served first under scheduler.policy=priority
        self.status = SequenceStatus.WAITING  # written by SequenceLifecycle
        self.token_ids = list(token_ids)  # appended to by Postprocessor
        self.num_prompt_tokens = len(token_ids)
        self.computed_len = 0  # written by BlockManager (allocate, mark_computed, free)
        self.cached_len = 0  # written by BlockManager (allocate, fork)
        # sampled by launched decode rounds, not yet read back; written by Postprocessor
        self.num_in_flight_tokens = 0
        self.block_table: list[int] = []  # written by BlockManager
        self.num_registered_blocks = 0  # leading blocks already published to the prefix cache; BlockManager's
        # chained hashes of its leading full blocks, as far as known; BlockManager's
        self.block_hashes: list[int] = []
        self.token_row: int | None = None  # its row of the device's token table while running; TokenRows'
        self.sampling_params = sampling_params
        self.generator: torch.Generator | None = None
        if sampling_params.seed is not None:
            self.generator = torch.Generator().manual_seed(sampling_params.seed)
        # the other samples of its prompt (`SamplingParams.n`) until its prompt is computed: they take their
        # first tokens from its prefill and then run on their own, sharing its prompt's KV blocks; emptied by
        # Postprocessor when they start
        self.forks: list[Sequence] = forks or []
        # "stop" | "length", and the stop string or stop token id; written by Postprocessor
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        # log-probabilities of its output tokens where asked; appended to by Postprocessor
        self.logprobs: list[dict[int, float]] | None = [] if sampling_params.logprobs is not None else None
        # per prompt position, its token's log-probabilities where asked (`prompt_logprobs`: position 0 has
        # none, as nothing comes before it); appended to by Postprocessor as prefill steps compute them
        self.prompt_logprobs: list[dict[int, float] | None] | None = None
        if sampling_params.prompt_logprobs is not None:
            self.prompt_logprobs = [None]
        # an IncrementalDetokenizer where stop strings or streaming need the text; the engine's outputs
        self.detokenizer = None
        # (Penalties, row): its token history on the device, where penalised; the sampler's request processing
        self.penalty_history = None
        # (BadWords, row): its last output tokens on the device, where it has bad words of several tokens
        self.bad_words_history = None
        # its sample's grammar matcher (a GrammarState) where the request asks for structured outputs: set by
        # the engine's structured outputs at submission; the sampler's grammar masks advance its state
        self.grammar = None
        self.arrival_time = time.time()
        self.first_scheduled_time: float | None = None  # first admitted to a prefill: SequenceLifecycle
        self.first_token_time: float | None = None  # written by Postprocessor
        self.finished_time: float | None = None  # written by Postprocessor

    @property
    def host_len(self) -> int:
        return len(self.token_ids)

    @property
    def device_len(self) -> int:
        return len(self.token_ids) + self.num_in_flight_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        """1 while decoding (the newest sampled token); more while (re)filling the cache with a prompt."""
        return self.host_len - self.computed_len

    @property
    def first_prompt_logits_position(self) -> int | None:
        """The first position whose logits the prompt's log-probabilities still need (those at position p
        give token p + 1's); None when none are needed. The prefix cache serves only the blocks before it."""
        if self.prompt_logprobs is None or len(self.prompt_logprobs) >= self.num_prompt_tokens:
            return None
        return len(self.prompt_logprobs) - 1

    def prompt_logits_positions(self, num_new_tokens: int) -> range:
        """Of the next `num_new_tokens` tokens a prefill step computes, the positions whose logits give
        prompt log-probabilities not yet recorded."""
        first = self.first_prompt_logits_position
        if first is None:
            return range(0)
        start = max(self.computed_len, first)
        return range(start, min(self.computed_len + num_new_tokens, self.num_prompt_tokens - 1))

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    def completion_token_ids_between(self, start: int, end: int) -> list[int]:
        """Completion tokens `start` to `end`, copying only those (a stream reads a few at each step)."""
        return self.token_ids[self.num_prompt_tokens + start : self.num_prompt_tokens + end]

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED
