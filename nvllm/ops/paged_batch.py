"""The arguments of `nvllm::attention` that say what each sequence's queries attend to, shared by the op and
its implementations."""

from __future__ import annotations

from typing import NamedTuple

import torch


class PagedBatch(NamedTuple):
    """What each sequence's queries attend to in the paged cache: `nvllm::attention`'s arguments as its
    implementations take them."""

    cu_seqlens_q: torch.Tensor
    seqlens_k: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
