"""The two kernels of a cascade decode step on the GPU, per layer, for the Qwen3-0.6B attention shape (16
query heads, 8 KV heads of 128, KV blocks of 256 tokens). Each time is one call inside a CUDA graph, its
inputs read from memory (`experiments.kernels.skinny_matmul_bench.time_us`).

- The remainder pass (each row's one query over its own few blocks): flash-attn's decode kernel against
  nvllm's Triton kernel (`nvllm.ops.paged_decode_attention`, in one KV split), over batch rows x remainder
  lengths, each row's length drawn from [length / 2, length]. `experiments.kernels.decode_attention_bench`
  times
  both in every split count.
- The prefix pass (a group's queries over its shared prefix, one varlen sequence per chunk): the prefix
  whole and cut into chunks, over groups x rows per group x prefix lengths. What
  `nvllm.attention.cascade.PREFIX_CHUNKS_BY_ROWS` is chosen by.

`python -m experiments.kernels.cascade_kernels_bench`"""

from __future__ import annotations

import itertools
from functools import partial

import torch
from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.attention.paging import blocks_for
from nvllm.ops.paged_decode_attention import paged_decode_attention

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 16, 8, 128, 256
SCALE = HEAD_DIM**-0.5
NUM_BLOCKS = 4096
REMAINDERS = [(16, 300), (32, 300), (32, 1500), (48, 600), (64, 300), (64, 2000), (128, 1000), (256, 2000)]
REMAINDERS += [(384, 80), (384, 300), (384, 600), (512, 150)]  # (rows, longest remainder)
PREFIXES = [(1, 64, 1536), (1, 128, 1536), (1, 256, 1536), (1, 384, 1536), (1, 384, 1024), (4, 128, 1024)]
PREFIXES += [(8, 64, 1024), (16, 32, 1024)]  # (groups, rows per group, prefix length)
CHUNKS = (1, 2, 3, 4, 6)


def random_cache() -> tuple[torch.Tensor, torch.Tensor]:
    k_cache = torch.randn(NUM_BLOCKS, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    return k_cache, torch.randn_like(k_cache)


def remainder_pass(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    for rows, longest in REMAINDERS:
        width = blocks_for(longest, BLOCK)
        query = torch.randn(rows, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        tables = torch.randperm(NUM_BLOCKS, device="cuda")[: rows * width].to(torch.int32).view(rows, width)
        seqlens = torch.randint(max(longest // 2, 1), longest + 1, (rows,), dtype=torch.int32, device="cuda")
        flash = partial(
            flash_attn_with_kvcache, query[:, None], k_cache, v_cache, cache_seqlens=seqlens,
            block_table=tables, softmax_scale=SCALE, causal=True, return_softmax_lse=True,
        )  # fmt: skip
        triton = partial(paged_decode_attention, query, k_cache, v_cache, seqlens, tables, SCALE)
        flash_us, triton_us = time_us(flash), time_us(triton)
        gb = float(seqlens.sum()) * KV_HEADS * HEAD_DIM * 2 * k_cache.element_size() / 1e9
        print(
            f"remainder pass, {rows:4d} rows x up to {longest:5d} tokens ({gb * 1e3:5.0f} MB): flash-attn "
            f"{flash_us:6.1f} us ({gb / flash_us * 1e3:.2f} TB/s), Triton {triton_us:6.1f} us "
            f"({gb / triton_us * 1e3:.2f} TB/s)",
            flush=True,
        )


def chunked_prefix_pass(query, k_cache, v_cache, tables: torch.Tensor, rows: int, chunks: int):
    """The prefix pass as a plan lays it out: one varlen sequence per (group, chunk of whole blocks)."""
    groups, num_blocks = tables.shape
    bounds = [num_blocks * chunk // chunks for chunk in range(chunks + 1)]
    slots = [(group, first, end) for group in range(groups) for first, end in itertools.pairwise(bounds)]
    slot_tables = torch.zeros(len(slots), num_blocks, dtype=torch.int32, device="cuda")
    for slot, (group, first, _) in enumerate(slots):
        slot_tables[slot, : num_blocks - first] = tables[group, first:]
    cu_seqlens_q = torch.arange(len(slots) + 1, dtype=torch.int32, device="cuda") * rows
    key_lens = [(end - first) * BLOCK for _, first, end in slots]
    cu_seqlens_k = torch.tensor([0, *itertools.accumulate(key_lens)], dtype=torch.int32, device="cuda")
    queries = torch.cat([torch.arange(group * rows, (group + 1) * rows) for group, _, _ in slots]).cuda()
    return lambda: flash_attn_varlen_func(
        query[queries], k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, rows, num_blocks * BLOCK,
        softmax_scale=SCALE, causal=False, block_table=slot_tables, return_attn_probs=True,
    )  # fmt: skip


def prefix_pass(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    for groups, rows, prefix_len in PREFIXES:
        num_blocks = prefix_len // BLOCK
        tables = torch.arange(groups * num_blocks, dtype=torch.int32, device="cuda").view(groups, num_blocks)
        query = torch.randn(groups * rows, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        times = {
            chunks: time_us(chunked_prefix_pass(query, k_cache, v_cache, tables, rows, chunks))
            for chunks in CHUNKS
            if chunks <= num_blocks
        }
        print(
            f"prefix pass, {groups:2d} groups x {rows:3d} rows over {prefix_len} tokens: "
            + ", ".join(f"{chunks} chunks {us:5.1f} us" for chunks, us in times.items()),
            flush=True,
        )


if __name__ == "__main__":
    torch.manual_seed(0)
    caches = random_cache()
    remainder_pass(*caches)
    prefix_pass(*caches)
