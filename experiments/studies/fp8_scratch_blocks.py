"""How many KV blocks a layer hands flash-attn as a bf16 scratch copy over an fp8 cache, in one decode step
of the shared-prefix workload (its cascade prefix pass) and one prefill step of suffixes under the cached
prefix: every entry of the tables, as before 2026-12-03 evening, against each distinct block once
(`nvllm.ops.fp8_kv_cache.dequantized_blocks`), and for the prefix pass the blocks its chunks read, as the
round's plan numbers them since 2026-12-04 (`CascadePlan.prefix_scratch_tables`). Counted on the CPU from
the planner's own tables; no GPU.

    python -m experiments.studies.fp8_scratch_blocks [--rows 384] [--prefix-len 1536] [--prefill-rows 200]

Defaults: the `shared_prefix` workload (one 1,536-token prefix, suffixes U[16, 128], outputs up to 512)
on 256-token blocks; a block of Qwen3-8B's K and V (8 KV heads of 128) is 1 MiB in bf16."""

from __future__ import annotations

import argparse

import numpy as np
import torch

from nvllm.attention.cascade import plan_cascade
from nvllm.attention.paging import blocks_for
from nvllm.ops.fp8_kv_cache import first_uses

BLOCK = 256
MIB_A_BLOCK = BLOCK * 8 * 128 * 2 * 2 / 2**20  # K and V of 8 KV heads of 128, bf16


def tables_under_a_prefix(rows: int, prefix_len: int, most_own: int, seed: int = 0):
    """Block tables of `rows` sequences under one prefix of `prefix_len` tokens, each with up to `most_own`
    tokens of its own, and their lengths."""
    rng = np.random.default_rng(seed)
    lengths = prefix_len + rng.integers(16, most_own + 1, rows)
    prefix_blocks = prefix_len // BLOCK
    width = blocks_for(int(lengths.max()), BLOCK)
    tables = np.zeros((rows, width), np.int32)
    next_block = prefix_blocks + 1  # block 0 is the tables' padding
    for row, length in enumerate(lengths):
        own = blocks_for(int(length), BLOCK) - prefix_blocks
        tables[row, :prefix_blocks] = np.arange(1, prefix_blocks + 1)
        tables[row, prefix_blocks : prefix_blocks + own] = np.arange(next_block, next_block + own)
        next_block += own
    return tables, lengths


def scratch_blocks(tables: np.ndarray, max_seqlen_k: int) -> tuple[int, int]:
    """(entries, distinct blocks) of the columns `_readable` dequantizes for these tables."""
    columns = min(tables.shape[1], blocks_for(max_seqlen_k, BLOCK))
    _, first = first_uses(torch.as_tensor(tables[:, :columns]).flatten())
    return first.numel(), int(first.sum())


def main(rows: int, prefix_len: int, prefill_rows: int) -> None:
    decode_tables, lengths = tables_under_a_prefix(rows, prefix_len, 128 + 512)
    plan = plan_cascade(decode_tables, lengths[None, :].astype(np.int32), BLOCK, "auto")
    prefill_tables, prefill_lengths = tables_under_a_prefix(prefill_rows, prefix_len, 128)
    for name, tables, longest in (
        (f"decode step of {rows} rows, cascade's prefix pass", plan.prefix_block_tables, int(lengths.max())),
        (f"prefill step of {prefill_rows} suffixes", prefill_tables, int(prefill_lengths.max())),
    ):
        entries, distinct = scratch_blocks(np.asarray(tables), longest)
        print(
            f"{name}: {entries} blocks a layer ({entries * MIB_A_BLOCK:.0f} MiB) before, "
            f"{distinct} ({distinct * MIB_A_BLOCK:.0f} MiB) each distinct block once"
        )
    planned = int(plan.prefix_scratch_count)
    print(f"decode step's prefix pass, numbered by the plan: {planned} blocks a layer, the chunks' own")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=384, help="decode rows under the prefix")
    parser.add_argument("--prefix-len", type=int, default=1536, help="tokens of the shared prefix")
    parser.add_argument("--prefill-rows", type=int, default=200, help="suffixes in one prefill step")
    args = parser.parse_args()
    main(args.rows, args.prefix_len, args.prefill_rows)
