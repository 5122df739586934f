"""Which step shapes get a CUDA graph and how steps are padded to them, decided once from the config and the
attention backend: the step-input builder pads decode batches to the plan's sizes, and the graph runner
records exactly the plan's graphs."""

from __future__ import annotations

from dataclasses import dataclass

from nvllm.attention import AttentionBackend, GraphSupport
from nvllm.attention.padding import MIN_SIZE, padded_size
from nvllm.config import EngineConfig

PREFILL_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # token counts that may get a prefill graph
PREFILL_GRAPH_SEQS = 4  # sequences a prefill graph holds (the empty ones are padding)
# A decode step has one query per sequence; its bound is kept at MIN_SIZE as every other one (padded_size),
# in the steps the builder makes and in the graphs recorded for them alike.
DECODE_MAX_SEQLEN_Q = MIN_SIZE


def uses_cuda_graphs(config: EngineConfig, backend: type[AttentionBackend]) -> bool:
    """Graphs need the compiled model on CUDA, and a backend whose graphs can be recorded."""
    return (
        bool(config.compile.enabled)
        and config.device.startswith("cuda")
        and backend.graph_support is not GraphSupport.NEVER
    )


def decode_capture_sizes(config: EngineConfig) -> tuple[int, ...]:
    """Decode batch sizes that get a graph; a batch runs in the smallest one that holds it. None below
    MIN_SIZE (see `nvllm.attention.padded_size`)."""
    largest = max(min(config.scheduler.max_num_seqs, config.compile.max_capture_batch_size), MIN_SIZE)
    sizes = [2, 4, 8] + list(range(16, largest + 16, 16))
    return tuple(sorted({min(size, largest) for size in sizes}))


def prefill_buckets(config: EngineConfig) -> tuple[int, ...]:
    """Token counts of the prefill graphs: none above `compile.max_prefill_graph_tokens` or the budget."""
    if not config.compile.compile_prefill:
        return ()
    most = min(config.compile.max_prefill_graph_tokens, config.scheduler.max_num_batched_tokens)
    return tuple(tokens for tokens in PREFILL_BUCKETS if tokens <= most)


@dataclass(frozen=True)
class GraphPlan:
    """The shapes that get a graph: `decode_sizes` (padded decode batch sizes) and `prefill_buckets` (token
    counts of prefill steps of at most `prefill_graph_seqs` sequences). Empty: no graphs, and decode batches
    are padded by the padding rule alone."""

    decode_sizes: tuple[int, ...] = ()
    prefill_buckets: tuple[int, ...] = ()
    prefill_graph_seqs: int = PREFILL_GRAPH_SEQS
    decode_max_seqlen_q: int = DECODE_MAX_SEQLEN_Q

    @classmethod
    def of(cls, config: EngineConfig, backend: type[AttentionBackend]) -> GraphPlan:
        """The plan of an engine with this (resolved) config and backend."""
        if not uses_cuda_graphs(config, backend):
            return cls()
        return cls(decode_capture_sizes(config), prefill_buckets(config))

    @property
    def has_graphs(self) -> bool:
        return bool(self.decode_sizes or self.prefill_buckets)

    def decode_batch_size(self, num_seqs: int) -> int:
        """The padded size of a decode batch: the smallest captured one that holds it, if any does."""
        if not self.decode_sizes or num_seqs > self.decode_sizes[-1]:
            return padded_size(num_seqs)
        return next(size for size in self.decode_sizes if size >= num_seqs)

    def prefill_bucket(self, num_tokens: int, num_seqs: int, num_logits: int) -> int | None:
        """The token count of the prefill graph that holds a step of these sizes (more logits rows than
        sequences where a prompt's forks sample too), or None where none does."""
        fits = (
            self.prefill_buckets
            and num_seqs <= self.prefill_graph_seqs
            and num_logits <= self.prefill_graph_seqs
            and num_tokens <= self.prefill_buckets[-1]
        )
        return next(tokens for tokens in self.prefill_buckets if tokens >= num_tokens) if fits else None
