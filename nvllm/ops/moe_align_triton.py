"""The (token, choice) pairs of a mixture-of-experts layer sorted by expert, the layout the grouped matmuls
(`nvllm.ops.moe_triton`, `nvllm.ops.moe_fp8_triton`) read: the pairs' indices (t * k + j) in order within
each expert, each expert's run padded to a whole number of row tiles with an index past the last pair, and
each tile's expert. No host sync and lengths that depend only on the shapes, so the sort is captured in
CUDA graphs; a padding token's pairs (routed to no expert, `nvllm.ops.moe_routing.padding_to_no_expert`)
are in no run.

Two ways to the same layout:
- one launch, a program per expert (`_align_kernel`): every program counts all experts' pairs, so that each
  knows where its run starts, then finds its own pairs among all of them. Each program reads every pair
  twice: cheap for a decode batch's few thousand pairs, not for a prefill's hundred thousand;
- in chunks of `CHUNK` pairs, three launches (`_count_chunks_kernel`, `_place_runs_kernel`,
  `_scatter_chunks_kernel`): each chunk's pairs counted by expert, then a program per expert places its run
  and each chunk's share of it from those counts, then each chunk sorts its own pairs by expert and writes
  each where its expert's share starts. Each pair is read twice in all.
`align_by_expert` takes the chunks from `ALIGN_IN_CHUNKS_MIN_PAIRS` pairs.

The chunks' kernels compile once for every step size: the counts that follow the step's tokens (pairs,
slots, chunks) are not specialized, as Triton would by their divisibility by 16. A prefill step whose
number of chunks was not a multiple of 16, which no warm-up prompt had given, compiled `_place_runs_kernel`
again inside the 30B bench's measured prefill (experiments/results/2026-12-06-h100-prefill-compiles.md).
The one launch, which serves decode batches, keeps Triton's specialization: the decode graphs' capture
meets both kinds of count."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvllm.ops.pdl import overlap_prior_kernel, pdl_launch

# Pairs a chunk: a program's tile of pairs when counting and sorting them.
CHUNK = 1024
# Chunks' counts a program of `_place_runs_kernel` reads at once.
CHUNK_BLOCK = 16
# From this many pairs `align_by_expert` sorts in chunks; below, in one launch, whose time grows with the
# pairs where the chunks' three launches take about the same at any size: the one launch was the faster up
# to 4,096 pairs and the chunks from 8,192 on, at Qwen3-30B-A3B's shapes on an H100
# (experiments/results/2026-12-06-h100-fp8-sums-and-small-kernels.md).
ALIGN_IN_CHUNKS_MIN_PAIRS = 8192


@triton.jit
def _align_kernel(
    ids_ptr,
    sorted_pairs_ptr,
    tile_expert_ptr,
    num_pairs,
    capacity,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    CHUNK: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program per expert: every program counts all experts' pairs (so each knows where its run
    starts without a second launch), then writes its own pairs in order, its padding and its tiles' expert;
    the last one also fills the slots and tiles past every run."""
    overlap_prior_kernel(PDL)
    expert = tl.program_id(0)
    counts = tl.zeros((EXPERTS_POW2,), tl.int32)
    for start in range(0, num_pairs, CHUNK):
        counts += count_by_expert(ids_ptr, start, num_pairs, NUM_EXPERTS, EXPERTS_POW2, CHUNK)
    run_start = pad_runs_and_tile_experts(
        sorted_pairs_ptr, tile_expert_ptr, counts, expert, num_pairs, capacity, NUM_EXPERTS, BLOCK_M, CHUNK
    )
    seen = tl.full([], 0, tl.int32)
    for start in range(0, num_pairs, CHUNK):
        offsets = start + tl.arange(0, CHUNK)
        inside = offsets < num_pairs
        mine = (tl.load(ids_ptr + offsets, inside, NUM_EXPERTS) == expert).to(tl.int32)
        rank = seen + tl.cumsum(mine, 0) - 1
        tl.store(sorted_pairs_ptr + run_start + rank, offsets, mask=mine != 0)
        seen += tl.sum(mine)


@triton.jit
def count_by_expert(
    ids_ptr, start, num_pairs, NUM_EXPERTS: tl.constexpr, EXPERTS_POW2: tl.constexpr, CHUNK: tl.constexpr
):
    """The pairs `start` to `start + CHUNK` (those before `num_pairs`) counted by expert, `[EXPERTS_POW2]`;
    pairs of no expert (padding tokens') in no count."""
    offsets = start + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + offsets, offsets < num_pairs, NUM_EXPERTS).to(tl.int32)
    return routed_counts(ids, ids < NUM_EXPERTS, EXPERTS_POW2)


@triton.jit
def routed_counts(ids, routed, EXPERTS_POW2: tl.constexpr):
    """The 1-D `ids` where `routed` counted by expert, `[EXPERTS_POW2]`; the others (slots past the end,
    pairs of no expert) in no count."""
    # the histogram counts every slot: the others as expert 0, taken off its count again
    outside = ids.shape[0] - tl.sum(routed.to(tl.int32))
    experts = tl.arange(0, EXPERTS_POW2)
    return tl.histogram(tl.where(routed, ids, 0), EXPERTS_POW2) - tl.where(experts == 0, outside, 0)


@triton.jit
def pad_runs_and_tile_experts(
    sorted_pairs_ptr,
    tile_expert_ptr,
    counts,
    expert,
    num_pairs,
    capacity,
    NUM_EXPERTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """The part of `align_by_expert`'s layout that follows from the experts' pair `counts` alone, written by
    `expert`'s program: its run's padding slots and its tiles' expert; the last expert's program also fills
    the slots and tiles past every run. Returns where `expert`'s run starts."""
    experts = tl.arange(0, counts.shape[0])
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    run_start = tl.sum(tl.where(experts < expert, padded, 0))
    count = tl.sum(tl.where(experts == expert, counts, 0))
    run_length = tl.sum(tl.where(experts == expert, padded, 0))
    padding = count + tl.arange(0, BLOCK_M)
    tl.store(sorted_pairs_ptr + run_start + padding, num_pairs, mask=padding < run_length)
    for tile in range(0, run_length // BLOCK_M, CHUNK):
        tiles = tile + tl.arange(0, CHUNK)
        tl.store(tile_expert_ptr + run_start // BLOCK_M + tiles, expert, mask=tiles < run_length // BLOCK_M)
    if expert == NUM_EXPERTS - 1:
        total = tl.sum(padded)
        for start in range(total, capacity, CHUNK):
            slots = start + tl.arange(0, CHUNK)
            tl.store(sorted_pairs_ptr + slots, num_pairs, mask=slots < capacity)
        num_tiles = (capacity + BLOCK_M - 1) // BLOCK_M
        for start in range(total // BLOCK_M, num_tiles, CHUNK):
            tiles = start + tl.arange(0, CHUNK)
            tl.store(tile_expert_ptr + tiles, NUM_EXPERTS, mask=tiles < num_tiles)
    return run_start


def empty_tiles(
    num_pairs: int, num_experts: int, block_m: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """`align_by_expert`'s outputs, unwritten: their lengths depend only on the shapes, as at most
    min(E, pairs) experts are used, each padded by less than `block_m`."""
    capacity = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    sorted_pairs = torch.empty(capacity, dtype=torch.int32, device=device)
    tile_expert = torch.empty(triton.cdiv(capacity, block_m), dtype=torch.int32, device=device)
    return sorted_pairs, tile_expert


def align_by_expert(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs' indices (t * k + j) sorted by expert (in order within an expert), each expert's run padded
    to a multiple of `block_m` with the index `num_pairs`; and each tile's expert (`num_experts` for tiles
    past the last run). Their lengths depend only on the shapes: at most min(E, pairs) experts are used,
    each padded by less than `block_m` (`empty_tiles`). One kernel launch, or three in chunks from
    `ALIGN_IN_CHUNKS_MIN_PAIRS` pairs (the module docstring)."""
    num_pairs = topk_ids.numel()
    topk_ids = topk_ids.contiguous()
    sorted_pairs, tile_expert = empty_tiles(num_pairs, num_experts, block_m, topk_ids.device)
    if num_pairs >= ALIGN_IN_CHUNKS_MIN_PAIRS:
        align_in_chunks(topk_ids, num_experts, block_m, sorted_pairs, tile_expert)
        return sorted_pairs, tile_expert
    _align_kernel[(num_experts,)](
        topk_ids,
        sorted_pairs,
        tile_expert,
        num_pairs,
        sorted_pairs.numel(),
        NUM_EXPERTS=num_experts,
        EXPERTS_POW2=triton.next_power_of_2(num_experts),
        BLOCK_M=block_m,
        CHUNK=CHUNK,
        num_warps=4,
        **pdl_launch(topk_ids.device),
    )
    return sorted_pairs, tile_expert


@triton.jit(do_not_specialize=["num_pairs"])
def _count_chunks_kernel(
    ids_ptr,
    chunk_counts_ptr,
    num_pairs,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    CHUNK: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program per chunk of pairs: its pairs' count by expert, a row of `[chunks, EXPERTS_POW2]`."""
    overlap_prior_kernel(PDL)
    chunk = tl.program_id(0)
    counts = count_by_expert(ids_ptr, chunk * CHUNK, num_pairs, NUM_EXPERTS, EXPERTS_POW2, CHUNK)
    tl.store(chunk_counts_ptr + chunk * EXPERTS_POW2 + tl.arange(0, EXPERTS_POW2), counts)


@triton.jit(do_not_specialize=["num_pairs", "capacity", "num_chunks"])
def _place_runs_kernel(
    chunk_counts_ptr,
    chunk_starts_ptr,
    sorted_pairs_ptr,
    tile_expert_ptr,
    num_pairs,
    capacity,
    num_chunks,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr,
    CHUNK: tl.constexpr,
    CHUNK_BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program per expert: its run's start from all chunks' counts, its padding and tiles' expert; and
    for each chunk, where the chunk's pairs of this expert go less where they stand in the chunk sorted by
    expert (after the chunk's pairs of the experts before), so that `_scatter_chunks_kernel` adds the one
    to the other."""
    overlap_prior_kernel(PDL)
    expert = tl.program_id(0)
    experts = tl.arange(0, EXPERTS_POW2)
    block = tl.arange(0, CHUNK_BLOCK)
    counts = tl.zeros((EXPERTS_POW2,), tl.int32)
    for first in range(0, num_chunks, CHUNK_BLOCK):
        chunks = first + block
        rows = chunk_counts_ptr + chunks[:, None] * EXPERTS_POW2 + experts[None, :]
        counts += tl.sum(tl.load(rows, mask=(chunks < num_chunks)[:, None], other=0), 0)
    run_start = pad_runs_and_tile_experts(
        sorted_pairs_ptr, tile_expert_ptr, counts, expert, num_pairs, capacity, NUM_EXPERTS, BLOCK_M, CHUNK
    )
    placed = run_start  # this expert's pairs of the chunks before
    for first in range(0, num_chunks, CHUNK_BLOCK):
        chunks = first + block
        inside = chunks < num_chunks
        rows = chunk_counts_ptr + chunks[:, None] * EXPERTS_POW2 + experts[None, :]
        chunk_counts = tl.load(rows, mask=inside[:, None], other=0)
        mine = tl.sum(tl.where(experts[None, :] == expert, chunk_counts, 0), 1)
        before_mine = tl.sum(tl.where(experts[None, :] < expert, chunk_counts, 0), 1)
        starts = placed + tl.cumsum(mine, 0) - mine - before_mine
        tl.store(chunk_starts_ptr + chunks * EXPERTS_POW2 + expert, starts, mask=inside)
        placed += tl.sum(mine)


@triton.jit(do_not_specialize=["num_pairs"])
def _scatter_chunks_kernel(
    ids_ptr,
    chunk_starts_ptr,
    sorted_pairs_ptr,
    num_pairs,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_POW2: tl.constexpr,
    CHUNK: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program per chunk: its pairs sorted by expert, in order within one (the key is the expert, then
    the pair's place in the chunk), each written at its expert's start for the chunk plus its place in the
    sorted chunk. Pairs of no expert, and slots past the end, sort last and are not written."""
    overlap_prior_kernel(PDL)
    chunk = tl.program_id(0)
    places = tl.arange(0, CHUNK)
    offsets = chunk * CHUNK + places
    ids = tl.load(ids_ptr + offsets, offsets < num_pairs, NUM_EXPERTS).to(tl.int32)
    keys = tl.sort(ids * CHUNK + places)
    experts = keys // CHUNK
    routed = experts < NUM_EXPERTS
    starts = tl.load(chunk_starts_ptr + chunk * EXPERTS_POW2 + experts, mask=routed, other=0)
    tl.store(sorted_pairs_ptr + starts + places, chunk * CHUNK + keys % CHUNK, mask=routed)


def align_in_chunks(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_m: int,
    sorted_pairs: torch.Tensor,
    tile_expert: torch.Tensor,
) -> None:
    """`align_by_expert`'s layout into `sorted_pairs` and `tile_expert` (`empty_tiles`'), by chunks of pairs:
    three launches."""
    num_pairs = topk_ids.numel()
    num_chunks = triton.cdiv(num_pairs, CHUNK)
    experts_pow2 = triton.next_power_of_2(num_experts)
    chunk_counts = torch.empty((num_chunks, experts_pow2), dtype=torch.int32, device=topk_ids.device)
    chunk_starts = torch.empty_like(chunk_counts)
    shape = dict(NUM_EXPERTS=num_experts, EXPERTS_POW2=experts_pow2, CHUNK=CHUNK)
    launch = dict(num_warps=4, **pdl_launch(topk_ids.device))
    _count_chunks_kernel[(num_chunks,)](topk_ids, chunk_counts, num_pairs, **shape, **launch)
    _place_runs_kernel[(num_experts,)](
        chunk_counts,
        chunk_starts,
        sorted_pairs,
        tile_expert,
        num_pairs,
        sorted_pairs.numel(),
        num_chunks,
        BLOCK_M=block_m,
        CHUNK_BLOCK=CHUNK_BLOCK,
        **shape,
        **launch,
    )
    _scatter_chunks_kernel[(num_chunks,)](topk_ids, chunk_starts, sorted_pairs, num_pairs, **shape, **launch)
