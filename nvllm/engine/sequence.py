from __future__ import annotations

import itertools
from enum import Enum, auto

import torch

from nvllm.sampling_params import SamplingParams


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    """One request: its tokens, how many of them have KV in the cache, and the blocks that hold it."""

    _ids = itertools.count()

    def __init__(self, token_ids: list[int], sampling_params: SamplingParams):
        self.seq_id = next(Sequence._ids)
        self.status = SequenceStatus.WAITING
        self.token_ids = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.num_computed_tokens = 0  # tokens whose K/V are in the cache (cache hits included)
        self.num_cached_tokens = 0  # of those, how many came from the prefix cache at admission
        self.block_table: list[int] = []
        self.num_registered_blocks = 0  # leading blocks already published to the prefix cache
        # Tokens of decode rounds launched but not yet read back: they count in the length (positions, KV
        # slots and limits are planned with them) but are not in `token_ids` until the host has them.
        self.num_pending_tokens = 0
        self.sampling_params = sampling_params
        self.generator: torch.Generator | None = None
        if sampling_params.seed is not None:
            self.generator = torch.Generator().manual_seed(sampling_params.seed)

    def __len__(self) -> int:
        return len(self.token_ids) + self.num_pending_tokens

    @property
    def last_token(self) -> int:
        """The newest token the host has (with tokens pending, the newest is still on the device)."""
        return self.token_ids[-1]

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        """1 while decoding (the last sampled token); more while (re)filling the cache with a prompt."""
        return len(self) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED
