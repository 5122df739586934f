"""CUDA graphs recorded by hand around the compiled model: decode steps per padded batch size (with or
without cascade attention), small prefill steps per token bucket. A step that one of them holds is: copy
its inputs into the graphs' static buffers, replay. Replaying a `torch.cuda.CUDAGraph` goes through
neither dynamo's guards nor inductor's graph-tree bookkeeping, which cost more host time per step than a
small decode step takes on the GPU (experiments/results/2026-11-29-h200-qwen3-0.6b.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nvllm.attention import AttentionBackend, AttentionMetadata
from nvllm.attention.cascade import CascadePlan, empty_plan
from nvllm.ops.linear_ops import SKINNY_MAX_ROWS
from nvllm.runner.graph_plan import GraphPlan
from nvllm.runner.step_inputs import StepInputs, dummy_step
from nvllm.transfer import copy_from_host, to_device

STATIC_INPUTS = (
    "input_ids",
    "token_rows",
    "positions",
    "slot_mapping",
    "cu_seqlens_q",
    "seqlens_k",
    "block_tables",
    "logits_indices",
)
DECODE_STEP_INPUTS = (
    "token_rows",
    "positions",
    "slot_mapping",
    "seqlens_k",
    "block_tables",
)  # copied per step
# a cascade plan's tensors, copied once per round: its groups are inputs of the graph, not part of it
CASCADE_INPUTS = (
    "prefix_query_rows",
    "prefix_cu_seqlens_q",
    "prefix_cu_seqlens_k",
    "prefix_block_tables",
    "partial_rows",
    "has_partial",
    "prefix_lens",
    "remainder_block_tables",
    "prefix_scratch_tables",
    "prefix_scratch_sources",
    "prefix_scratch_count",
)


def record(forward: Callable, args: tuple, pool, warm_up: bool) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """`forward(*args)` recorded into a CUDA graph that allocates from `pool` (None: a new one); run once
    outside the capture first where `warm_up` (see `warm_up_class`)."""
    if warm_up:
        forward(*args)
        torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        output = forward(*args)
    return graph, output


def leading(buffer: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The view of a static buffer that a graph of `like`'s shape takes: its first elements, in that shape.
    Contiguous whatever the shape (a strided view would be a graph of its own to dynamo)."""
    return buffer.view(-1)[: like.numel()].view(like.shape)


def enclosing(plans: list[CascadePlan], name: str, device) -> torch.Tensor:
    """A flat zero buffer for the plans' tensor `name` that holds any of them (the number of prefix chunks,
    and so the shapes, depend on the batch size)."""
    tensors = [getattr(plan, name) for plan in plans]
    return torch.zeros(max(tensor.numel() for tensor in tensors), dtype=tensors[0].dtype, device=device)


def warm_up_class(kind: str, num_rows: int, kv_splits: int) -> tuple:
    """Graphs of one class launch the same kernels, so only the first of them needs a run outside the
    capture (a capture cannot wait for the device, as a kernel's first launch may: Triton compiles it and
    autotunes it there). A class is a graph's kind, how many splits its decode attention cuts the KV into,
    whether its rows take the skinny matmul, and whether their count is a multiple of 16 (Triton compiles a
    kernel apart for each)."""
    return kind, kv_splits, num_rows <= SKINNY_MAX_ROWS, num_rows % 16 == 0


class GraphRunner:
    """Owns the recorded graphs (the `plan`'s) and their static input buffers: `can_replay(inputs)`,
    `replay(inputs)`."""

    @torch.no_grad()  # as in ModelRunner.forward
    def __init__(
        self,
        forward: Callable,
        backend: AttentionBackend,
        plan: GraphPlan,
        device,
        token_table: torch.Tensor,
        num_kv_heads: int,
    ):
        """Decode graphs read each sequence's token from `token_table` themselves (see StepInputs);
        `num_kv_heads`: the KV heads of this rank's attention layers."""
        self.backend, self.device, self.plan = backend, device, plan
        decode_sizes, buckets, prefill_seqs = plan.decode_sizes, plan.prefill_buckets, plan.prefill_graph_seqs
        # Static buffers for the largest graph of each kind: views of their leading rows are each graph's
        # inputs. Decode's `cu_seqlens_q` (0, 1, ..., size) and `logits_indices` (0, ..., size - 1) are
        # prefixes of the largest batch's, never copied; prefill graphs are recorded with every sequence
        # empty, so that no kernel reads past the rows a smaller bucket takes.
        self.static: dict[str, dict[str, torch.Tensor]] = {}
        if decode_sizes:
            self.static["decode"] = self._static_buffers(
                dummy_step(backend, decode_sizes[-1], decode_sizes[-1])
            )
        # Cascade steps get graphs of their own, keyed by batch size only: the groups, their sizes and prefix
        # lengths are tensors, bounded by the batch size (queries in a group), max_model_len (a prefix) and
        # MAX_CASCADE_GROUPS, so one graph per size serves every plan.
        cascade = backend.cascade != "off" and bool(decode_sizes)
        if cascade:
            plans = [empty_plan(size, backend.block_table_width, size) for size in decode_sizes]
            self.static["cascade"] = {name: enclosing(plans, name, device) for name in CASCADE_INPUTS}
        if buckets:
            prefill = self._static_buffers(dummy_step(backend, buckets[-1], prefill_seqs))
            for name in ("cu_seqlens_q", "seqlens_k", "logits_indices"):
                prefill[name].zero_()
            self.static["prefill"] = prefill
        self._copied: dict[str, torch.Tensor] = {}  # the tensor last copied into each decode buffer
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.logits: dict[tuple, torch.Tensor] = {}

        def decode_forward(token_rows, *args):
            return forward(token_table[token_rows], *args)

        pool = None  # shared by every graph (they never run at the same time); the largest first
        warmed_up: set[tuple] = set()

        def capture(key: tuple, forward: Callable, args: tuple, num_rows: int) -> None:
            nonlocal pool
            splits = backend.decode_kv_splits(num_rows, num_kv_heads) if key[0] != "prefill" else 0
            warm_up = warm_up_class(key[0], num_rows, splits)
            graph, self.logits[key] = record(forward, args, pool, warm_up not in warmed_up)
            warmed_up.add(warm_up)
            self.graphs[key], pool = graph, graph.pool()

        for size in reversed(decode_sizes):
            for kind in ("decode", "cascade") if cascade else ("decode",):
                capture((kind, size), decode_forward, self._arguments(kind, size, size), size)
        for num_tokens in reversed(buckets):
            args = self._arguments("prefill", num_tokens, prefill_seqs)
            capture(("prefill", num_tokens), forward, args, num_tokens)
        torch.cuda.synchronize()

    def _static_buffers(self, inputs: StepInputs) -> dict[str, torch.Tensor]:
        return {name: to_device(getattr(inputs, name), self.device) for name in STATIC_INPUTS}

    def _arguments(self, kind: str, num_tokens: int, num_seqs: int) -> tuple:
        """A graph's inputs: views of the static buffers. `kind`: decode, cascade (a decode step by cascade
        attention) or prefill."""
        cascade = None
        if kind == "cascade":
            kind, rows = "decode", num_seqs
            static = self.static["cascade"]
            # a plan of this size's shapes (its number of chunks), its tensors views of the static buffers
            shaped = empty_plan(rows, self.backend.block_table_width, rows)
            cascade = dataclasses.replace(
                shaped, **{name: leading(static[name], getattr(shaped, name)) for name in CASCADE_INPUTS}
            )
        static = self.static[kind]
        meta = AttentionMetadata(
            slot_mapping=static["slot_mapping"][:num_tokens],
            cu_seqlens_q=static["cu_seqlens_q"][: num_seqs + 1],
            seqlens_k=static["seqlens_k"][:num_seqs],
            block_tables=static["block_tables"][:num_seqs],
            max_seqlen_q=self.plan.decode_max_seqlen_q if kind == "decode" else num_tokens,  # upper bounds
            max_seqlen_k=self.backend.max_model_len,
            cascade=cascade,
        )
        return (
            static["token_rows" if kind == "decode" else "input_ids"][:num_tokens],
            static["positions"][:num_tokens],
            meta,
            static["logits_indices"][:num_seqs],
        )

    def _key(self, inputs: StepInputs) -> tuple | None:
        if inputs.prompt_logits_indices is not None:  # logits of more rows than any graph holds
            return None
        if inputs.is_prefill:
            bucket = self.plan.prefill_bucket(inputs.num_tokens, inputs.num_seqs, inputs.num_logits)
            return ("prefill", bucket) if bucket is not None else None
        kind = "decode" if inputs.cascade is None else "cascade"
        key = (kind, inputs.num_seqs)
        return key if key in self.graphs and inputs.input_ids is None else None

    def can_replay(self, inputs: StepInputs) -> bool:
        return self._key(inputs) is not None

    def replay(self, inputs: StepInputs) -> torch.Tensor:
        """The logits of a step that `can_replay`, in the graphs' shared pool: valid until the next replay.
        Decode inputs are already padded to a captured size (and on the device); prefill inputs are padded
        here to their bucket."""
        key = self._key(inputs)
        if inputs.is_prefill:
            for name, tensor in self._pad_prefill(inputs, key[1]).items():
                copy_from_host(self.static["prefill"][name][: tensor.shape[0]], tensor)
        else:
            sources = [("decode", name, getattr(inputs, name)) for name in DECODE_STEP_INPUTS]
            if inputs.cascade is not None:
                sources += [("cascade", name, getattr(inputs.cascade, name)) for name in CASCADE_INPUTS]
            for kind, name, source in sources:
                if source is not self._copied.get(name):  # a round's steps share one block table: copied once
                    leading(self.static[kind][name], source).copy_(source, non_blocking=True)
                    self._copied[name] = source  # held, so that its id cannot pass to a new tensor
        self.graphs[key].replay()
        return self.logits[key][: inputs.num_logits]

    def release(self) -> None:
        """Destroy the graphs now (a graph still running is freed when it ends), not whenever the last
        reference goes: NCCL's communicator cannot be destroyed while a graph that captured its collectives
        exists. Never waits for the device."""
        for graph in self.graphs.values():
            graph.reset()
        self.graphs.clear()
        self.logits.clear()
        self.static.clear()
        self._copied.clear()

    def _pad_prefill(self, inputs: StepInputs, num_tokens: int) -> dict[str, torch.Tensor]:
        """A prefill step's host tensors padded to a prefill graph's shapes: `num_tokens` tokens (padded ones
        belong to no sequence and write no KV), the plan's `prefill_graph_seqs` sequences (empty ones) with
        block tables of the static width, and as many logits rows (the padded ones read token 0)."""
        num_seqs = self.plan.prefill_graph_seqs
        tokens_short = num_tokens - inputs.num_tokens
        seqs_short = num_seqs - inputs.num_seqs
        block_tables = inputs.block_tables
        width = self.backend.block_table_width
        return {
            "input_ids": F.pad(inputs.input_ids, (0, tokens_short)),
            "positions": F.pad(inputs.positions, (0, tokens_short)),
            "slot_mapping": F.pad(inputs.slot_mapping, (0, tokens_short), value=-1),
            "cu_seqlens_q": F.pad(inputs.cu_seqlens_q, (0, seqs_short), value=int(inputs.cu_seqlens_q[-1])),
            "seqlens_k": F.pad(inputs.seqlens_k, (0, seqs_short)),
            "block_tables": F.pad(block_tables, (0, width - block_tables.shape[1], 0, seqs_short)),
            "logits_indices": F.pad(inputs.logits_indices, (0, num_seqs - inputs.num_logits)),
        }
