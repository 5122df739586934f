"""The arguments of `nvllm::attention` and `nvllm::prefix_attention` that say what each sequence's (each
group's) queries attend to, shared by the ops and their implementations."""

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


class PrefixBatch(NamedTuple):
    """What each group's queries attend to in cascade attention's prefix pass: `nvllm::prefix_attention`'s
    arguments as its implementations take them; `scratch_block_tables`, `scratch_sources` and
    `scratch_count` the plan's numbering of the blocks for an fp8 cache's scratch copy (None: numbered where
    needed)."""

    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    scratch_block_tables: torch.Tensor | None
    scratch_sources: torch.Tensor | None
    scratch_count: torch.Tensor | None
