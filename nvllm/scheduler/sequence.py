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
    - `cached_len`: of those, the ones the prefix cache held at admission."""

    _ids = itertools.count()

    def __init__(self, token_ids: list[int], sampling_params: SamplingParams, priority: int = 0):
        self.seq_id = next(Sequence._ids)  # also its arrival order
        self.priority = priority  # lower is served first under scheduler.policy=priority
        self.status = SequenceStatus.WAITING
        self.token_ids = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.computed_len = 0
        self.cached_len = 0
        self.num_in_flight_tokens = 0  # sampled by launched decode rounds, not yet read back
        self.block_table: list[int] = []
        self.num_registered_blocks = 0  # leading blocks already published to the prefix cache
        self.block_hashes: list[int] = []  # chained hashes of its leading full blocks, as far as known
        self.token_row: int | None = None  # its row of the device's token table while running
        self.sampling_params = sampling_params
        self.generator: torch.Generator | None = None
        if sampling_params.seed is not None:
            self.generator = torch.Generator().manual_seed(sampling_params.seed)
        # the other samples of its prompt (`SamplingParams.n`) until its prompt is computed: they take their
        # first tokens from its prefill and then run on their own, sharing its prompt's KV blocks
        self.forks: list[Sequence] = []
        self.finish_reason: str | None = None  # "stop" | "length"
        self.stop_reason: str | int | None = None  # the stop string or stop token id
        self.logprobs: list[dict[int, float]] | None = [] if sampling_params.logprobs is not None else None
        self.detokenizer = None  # an IncrementalDetokenizer where stop strings or streaming need the text
        self.penalty_history = None  # (Penalties, row): its token history on the device, where penalised
        self.arrival_time = time.time()
        self.first_token_time: float | None = None
        self.finished_time: float | None = None

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
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED
