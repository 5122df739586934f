"""Decode CUDA graphs recorded by hand around the compiled model (`compile.cuda_graphs=manual`).

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

from nvllm.engine.step_inputs import StepInputBuilder, StepInputs
from nvllm.layers.attention import AttentionMetadata

STATIC_INPUTS = ("input_ids", "positions", "slot_mapping", "cu_seqlens_q", "seqlens_k", "block_tables")
# A decode batch's `cu_seqlens_q` is always 0, 1, ..., size: a prefix of the static buffer, never copied.
STEP_INPUTS = tuple(name for name in STATIC_INPUTS if name != "cu_seqlens_q")
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


class DecodeGraphs:
    @torch.no_grad()  # as in ModelRunner._run_model
    def __init__(self, forward: Callable, builder: StepInputBuilder, device: str):
        from nvllm.ops import flash_attention  # the only backend these graphs serve (imports flash-attn)

        largest = builder.dummy_decode(builder.decode_batch_sizes[-1])
        self.static = {name: getattr(largest, name).to(device) for name in STATIC_INPUTS}
        self.max_seqlen_k = largest.max_seqlen_k
        self._copied: dict[str, torch.Tensor] = {}  # the tensor last copied into each static buffer
        # per (batch size, KV splits): the attention op reads the splits when it runs, at capture
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.logits: dict[tuple[int, int], torch.Tensor] = {}
        pool = None
        for size in reversed(builder.decode_batch_sizes):  # largest first: the others fit in its pool
            args = self._arguments(size)
            for num_splits in sorted({0, decode_num_splits(size, longest_context=1)}):
                with flash_attention.decode_num_splits(num_splits):
                    forward(*args)  # compiles (the first time) and warms up outside the capture
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        self.logits[size, num_splits] = forward(*args)
                pool = graph.pool()
                self.graphs[size, num_splits] = graph
        torch.cuda.synchronize()

    def _arguments(self, size: int) -> tuple:
        static = self.static
        meta = AttentionMetadata(
            slot_mapping=static["slot_mapping"][:size],
            cu_seqlens_q=static["cu_seqlens_q"][: size + 1],
            seqlens_k=static["seqlens_k"][:size],
            block_tables=static["block_tables"][:size],
            max_seqlen_q=1,
            max_seqlen_k=self.max_seqlen_k,
        )
        return static["input_ids"][:size], static["positions"][:size], meta, None

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
