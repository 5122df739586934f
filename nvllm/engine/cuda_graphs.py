"""CUDA graphs recorded by hand around the compiled model (`compile.cuda_graphs=manual`): decode steps per
padded batch size, small prefill steps per token bucket.

Inductor's CUDA graph trees (`mode="reduce-overhead"`) replay through dynamo on every call: guards, the
prologue that gathers every parameter as an input, the graph-tree bookkeeping — about 1 ms of host time
per step on the H200 host (experiments/results/2026-11-29-h200-qwen3-0.6b.md), which a decode step of
2-6 ms cannot hide. Here the model is compiled without graphs, run once per padded batch size to record a
`torch.cuda.CUDAGraph`, and a step is: copy the inputs into static buffers, replay. Small batches get
a second graph that attends without splitting the KV (`decode_num_splits`), picked per step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from nvllm.engine.step_inputs import DECODE_MAX_SEQLEN_Q, StepInputBuilder, StepInputs
from nvllm.layers.attention import AttentionMetadata
from nvllm.ops.attention_ops import decode_kv_splits
from nvllm.transfer import copy_from_host

STATIC_INPUTS = (
    "input_ids",
    "positions",
    "slot_mapping",
    "cu_seqlens_q",
    "seqlens_k",
    "block_tables",
    "logits_indices",
)
# A decode batch's `cu_seqlens_q` (0, 1, ..., size) and `logits_indices` (0, ..., size - 1) are prefixes of
# the static buffers, never copied.
STEP_INPUTS = tuple(name for name in STATIC_INPUTS if name not in ("cu_seqlens_q", "logits_indices"))
# Decode steps of at most this many sequences, none longer than this many tokens, attend without splitting
# their KV (see `decode_num_splits`); every batch size up to it gets a graph of each kind.
ONE_SPLIT_MAX_BATCH = 32
ONE_SPLIT_MAX_CONTEXT = 768


def decode_num_splits(batch_size: int, longest_context: int) -> int:
    """flash-attn's KV splits for a decode step: 1 for small batches over short contexts, 0 (flash-attn's
    own choice) otherwise. Its choice splits to fill the GPU, and the combine kernel that then follows
    costs more than it saves there (H200, µs per call: batch 16 at context 700, 28.1 split vs 16.4 whole;
    batch 2: 15.7 vs 15.1 at context 700 but 16.2 vs 23.4 at 1,200; batch 64: 50.6 vs 52.5)."""
    return 1 if batch_size <= ONE_SPLIT_MAX_BATCH and longest_context <= ONE_SPLIT_MAX_CONTEXT else 0


def record(forward: Callable, args: tuple, pool) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """`forward(*args)` run once outside a capture (compiling it the first time, warming up), then recorded
    into a CUDA graph that allocates from `pool` (None: a new one)."""
    forward(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = forward(*args)
    return graph, output


class DecodeGraphs:
    @torch.no_grad()  # as in ModelRunner._run_model
    def __init__(self, forward: Callable, builder: StepInputBuilder, device: str):
        largest = builder.dummy_decode(builder.decode_batch_sizes[-1])
        self.static = {name: getattr(largest, name).to(device) for name in STATIC_INPUTS}
        self.max_seqlen_k = largest.max_seqlen_k
        self._copied: dict[str, torch.Tensor] = {}  # the tensor last copied into each static buffer
        # per (batch size, KV splits): the attention op reads the splits when it runs, at capture
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.logits: dict[tuple[int, int], torch.Tensor] = {}
        self.pool = None  # shared by every graph (they never run at the same time)
        for size in reversed(builder.decode_batch_sizes):  # largest first: the others fit in its pool
            args = self._arguments(size)
            for num_splits in sorted({0, decode_num_splits(size, longest_context=1)}):
                with decode_kv_splits(num_splits):
                    graph, self.logits[size, num_splits] = record(forward, args, self.pool)
                self.pool = graph.pool()
                self.graphs[size, num_splits] = graph
        torch.cuda.synchronize()

    def _arguments(self, size: int) -> tuple:
        static = self.static
        meta = AttentionMetadata(
            slot_mapping=static["slot_mapping"][:size],
            cu_seqlens_q=static["cu_seqlens_q"][: size + 1],
            seqlens_k=static["seqlens_k"][:size],
            block_tables=static["block_tables"][:size],
            max_seqlen_q=DECODE_MAX_SEQLEN_Q,
            max_seqlen_k=self.max_seqlen_k,
        )
        return static["input_ids"][:size], static["positions"][:size], meta, static["logits_indices"][:size]

    def holds(self, inputs: StepInputs) -> bool:
        """Whether a graph was recorded for this batch (larger ones run the compiled model directly)."""
        return (inputs.input_ids.shape[0], 0) in self.graphs

    def run(self, inputs: StepInputs) -> torch.Tensor:
        """Logits of a decode batch already padded to a captured size. They live in the graphs' shared
        pool: valid until the next replay."""
        size = inputs.input_ids.shape[0]
        for name in STEP_INPUTS:
            source = getattr(inputs, name)
            if source is not self._copied.get(name):  # a round's steps share one block table: copied once
                self.static[name][: source.shape[0]].copy_(source, non_blocking=True)
                self._copied[name] = source  # held, so that its id cannot pass to a new tensor
        key = size, decode_num_splits(size, inputs.longest_context)
        self.graphs[key].replay()
        return self.logits[key]


PREFILL_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # token counts that get a prefill graph
PREFILL_GRAPH_SEQS = 4  # sequences a prefill graph holds (the empty ones are padding)


def pad_prefill_inputs(inputs: StepInputs, num_tokens: int, width: int) -> dict[str, torch.Tensor]:
    """A prefill step's host tensors padded to a prefill graph's shapes: `num_tokens` tokens (padded ones
    belong to no sequence and write no KV), `PREFILL_GRAPH_SEQS` sequences (empty ones) with block tables
    `width` blocks wide, and as many logits rows (the padded ones read token 0)."""
    tokens_short = num_tokens - inputs.input_ids.shape[0]
    seqs_short = PREFILL_GRAPH_SEQS - inputs.seqlens_k.shape[0]
    block_tables = inputs.block_tables
    return {
        "input_ids": F.pad(inputs.input_ids, (0, tokens_short)),
        "positions": F.pad(inputs.positions, (0, tokens_short)),
        "slot_mapping": F.pad(inputs.slot_mapping, (0, tokens_short), value=-1),
        "cu_seqlens_q": F.pad(inputs.cu_seqlens_q, (0, seqs_short), value=int(inputs.cu_seqlens_q[-1])),
        "seqlens_k": F.pad(inputs.seqlens_k, (0, seqs_short)),
        "block_tables": F.pad(block_tables, (0, width - block_tables.shape[1], 0, seqs_short)),
        "logits_indices": F.pad(inputs.logits_indices, (0, PREFILL_GRAPH_SEQS - inputs.num_logits)),
    }


class PrefillGraphs:
    """Small prefill steps (a short prompt alone, a chunk, a few tokens past a prefix-cache hit) replayed
    from CUDA graphs: one per token bucket up to `max_tokens`, each for up to `PREFILL_GRAPH_SEQS`
    sequences. A compiled prefill without a graph launches its ~500 kernels from Python: 36 ms for a
    128-token prompt on the H200 host, for a few ms of GPU work."""

    @torch.no_grad()  # as in ModelRunner._run_model
    def __init__(self, forward: Callable, builder: StepInputBuilder, device: str, max_tokens: int, pool):
        self.buckets = [tokens for tokens in PREFILL_BUCKETS if tokens <= max_tokens]
        self.width, self.max_seqlen_k = builder.block_table_width, builder.max_model_len
        # every sequence empty: the recording computes nothing that matters
        empty = StepInputs(
            input_ids=torch.zeros(0, dtype=torch.int64),
            positions=torch.zeros(0, dtype=torch.int64),
            slot_mapping=torch.zeros(0, dtype=torch.int64),
            cu_seqlens_q=torch.zeros(1, dtype=torch.int32),
            seqlens_k=torch.zeros(0, dtype=torch.int32),
            block_tables=torch.zeros(0, self.width, dtype=torch.int32),
            max_seqlen_q=self.buckets[-1],
            max_seqlen_k=self.max_seqlen_k,
            logits_indices=torch.zeros(0, dtype=torch.int64),
            is_prefill=True,
            longest_context=0,
        )
        self.static = {
            name: tensor.to(device)
            for name, tensor in pad_prefill_inputs(empty, self.buckets[-1], self.width).items()
        }
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        for num_tokens in reversed(self.buckets):
            graph, self.logits[num_tokens] = record(forward, self._arguments(num_tokens), pool)
            pool = graph.pool()
            self.graphs[num_tokens] = graph
        torch.cuda.synchronize()

    def _arguments(self, num_tokens: int) -> tuple:
        static = self.static
        meta = AttentionMetadata(
            slot_mapping=static["slot_mapping"][:num_tokens],
            cu_seqlens_q=static["cu_seqlens_q"],
            seqlens_k=static["seqlens_k"],
            block_tables=static["block_tables"],
            max_seqlen_q=num_tokens,  # an upper bound, as the builder's is
            max_seqlen_k=self.max_seqlen_k,
        )
        return (
            static["input_ids"][:num_tokens],
            static["positions"][:num_tokens],
            meta,
            static["logits_indices"],
        )

    def holds(self, inputs: StepInputs) -> bool:
        """Whether a prefill step fits a graph (the runner asks only for prefill steps)."""
        num_tokens, num_seqs = inputs.input_ids.shape[0], inputs.seqlens_k.shape[0]
        return num_tokens <= self.buckets[-1] and num_seqs <= PREFILL_GRAPH_SEQS

    def run(self, inputs: StepInputs) -> torch.Tensor:
        """The logits of a prefill step that `holds`; valid until the next replay of any graph."""
        num_tokens = next(tokens for tokens in self.buckets if tokens >= inputs.input_ids.shape[0])
        for name, tensor in pad_prefill_inputs(inputs, num_tokens, self.width).items():
            copy_from_host(self.static[name][: tensor.shape[0]], tensor)
        self.graphs[num_tokens].replay()
        return self.logits[num_tokens][: inputs.num_logits]
