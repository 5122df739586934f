"""What every attention backend shares: the metadata its ops take, the padding rule and the decode test, and
what its CUDA graphs support."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import torch

from nvllm.attention.cascade import CascadePlan, plan_cascade
from nvllm.attention.padding import padded_size
from nvllm.attention.paging import blocks_for
from nvllm.transfer import to_device


class GraphSupport(enum.Enum):
    """What a backend's kernels allow inside a recorded CUDA graph."""

    NEVER = "never"  # its attention waits for the host (reads sequence lengths there): no graphs
    ALWAYS = "always"  # decode batches and prefill buckets alike: every length is read on the device


def one_query_per_sequence(num_query_rows: int, num_seqs: int) -> bool:
    """The decode test: a batch with as many query rows as sequences holds one query per sequence, which a
    backend may serve with a decode kernel. Step inputs are padded so that no other batch looks so."""
    return num_query_rows == num_seqs


def padded_prefill_sizes(num_tokens: int, num_seqs: int, longest_query: int) -> tuple[int, int]:
    """A prefill step's (tokens, sequences) padded by the padding rule, and by one more padded token where
    they would otherwise pass the decode test while a sequence has more than one query."""
    num_tokens, num_seqs = padded_size(num_tokens), padded_size(num_seqs)
    if one_query_per_sequence(num_tokens, num_seqs) and longest_query > 1:
        num_tokens += 1
    return num_tokens, num_seqs


@dataclass
class AttentionMetadata:
    """Where a step's tokens go in the paged KV cache and what each one attends to (see nvllm::attention)."""

    slot_mapping: torch.Tensor  # [num_tokens] int64, -1 for padding
    cu_seqlens_q: torch.Tensor  # [num_seqs + 1] int32
    seqlens_k: torch.Tensor  # [num_seqs] int32: cached + new tokens of each sequence
    block_tables: torch.Tensor  # [num_seqs, block_table_width] int32
    max_seqlen_q: int  # an upper bound, at least MIN_SIZE
    max_seqlen_k: int
    cascade: CascadePlan | None = None  # decode steps whose rows share prefixes (nvllm.attention.cascade)


class MetadataSource(Protocol):
    """The fields of a step's inputs that its attention metadata is made of (the runner's `StepInputs`)."""

    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    seqlens_k: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    cascade: CascadePlan | None


class AttentionBackend:
    """One backend's rules. `name` is what the custom ops dispatch on."""

    name: ClassVar[str]
    graph_support: ClassVar[GraphSupport]
    requirement: ClassVar[str]  # what `can_run` needs, for the error when it cannot
    block_size_multiple: ClassVar[int] = 1  # the KV block sizes its kernels can page through

    def __init__(self, block_size: int, max_model_len: int, cascade: str = "off"):
        """`cascade`: `attention.cascade` (auto | on | off)."""
        self.check_block_size(block_size)
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.cascade = cascade
        self.max_blocks_per_seq = blocks_for(max_model_len, block_size)
        # one more (never read) column when a sequence fits one block: no graph of its own for width 1
        self.block_table_width = padded_size(self.max_blocks_per_seq)

    @classmethod
    def can_run(cls, device: str) -> bool:
        return True

    @classmethod
    def check_block_size(cls, block_size: int) -> None:
        if block_size % cls.block_size_multiple:
            raise ValueError(
                f"cache.block_size={block_size} cannot be served by the {cls.name} backend: its kernels page "
                f"the KV cache in multiples of {cls.block_size_multiple} tokens; use attention.backend=torch "
                "for other sizes"
            )

    @classmethod
    def decode_kv_splits(cls, num_rows: int, num_kv_heads: int) -> int:
        """How many parts a decode step of `num_rows` rows cuts each row's KV into (its kernels read them
        apart and combine them). A function of the shapes alone, so that every replay of a CUDA graph runs
        the kernels it was recorded with."""
        return 1

    def cascade_plan(self, block_tables: np.ndarray, step_seqlens_k: np.ndarray) -> CascadePlan | None:
        """The cascade plan of a decode round (block tables `[rows, width]`, lengths `[steps, rows]`), or
        None where `attention.cascade` finds no group that pays."""
        if self.cascade == "off":
            return None
        return plan_cascade(block_tables, step_seqlens_k, self.block_size, self.cascade)

    def metadata(self, inputs: MetadataSource, device: torch.device | str) -> AttentionMetadata:
        """The step's attention metadata on `device` (inputs already there are used as they are)."""
        return AttentionMetadata(
            slot_mapping=to_device(inputs.slot_mapping, device),
            cu_seqlens_q=to_device(inputs.cu_seqlens_q, device),
            seqlens_k=to_device(inputs.seqlens_k, device),
            block_tables=to_device(inputs.block_tables, device),
            max_seqlen_q=inputs.max_seqlen_q,
            max_seqlen_k=inputs.max_seqlen_k,
            cascade=inputs.cascade.to(device) if inputs.cascade is not None else None,
        )
