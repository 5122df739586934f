"""Decode attention on the GPU, per layer: flash-attn's decode kernel in its KV split counts against nvllm's
Triton kernel (`nvllm.ops.paged_decode_attention`) in its, over batch rows x context lengths (each row's
length drawn from [length / 2, length]), for Qwen3-0.6B's and Qwen3-8B's heads (16 and 32 queries over 8
KV heads of 128; KV blocks of 256 tokens). Each time is one call inside a CUDA graph, its KV read from
memory (`experiments.kernels.skinny_matmul_bench.time_us`); the Triton kernel's in each of its tiles (KV
tokens a loop iteration) too. What decode's kernel (the Triton one), its split rule
(`FlashAttnBackend.decode_kv_splits`) and its tile rule (`paged_decode_attention.tile_tokens`) are chosen by.

With `--fp8`: the Triton kernel alone at the backend's split count, over a bf16 cache and over the same
cache in float8 e4m3 in each of its conversions (`FP8_CONVERSIONS`: the elements read in pairs, the value
tiles converted as loaded, both tiles in the dots' layouts), each at its default launch and its best of
`FP8_LAUNCHES`: what an fp8 cache's halved bytes buy in decode.

With `--launches`: the Triton kernel over the bf16 and the fp8 cache in each launch of a grid of splits,
tiles, warps, pipeline stages and registers a thread (`--splits`, `--tiles`, `--warps`, `--stages`,
`--registers`; by default `LAUNCH_GRID`), the fastest listed beside the launch decode makes today
(`paged_decode_attention.warps_and_stages`, `MAX_REGISTERS`). `--fp8-pairs`: an fp8 cache's elements read in
pairs in the launches and orders compared (`FP8_ELEMENT_PAIRS`).

With `--orders`: the Triton kernel over the bf16 and the fp8 cache with its programs started KV heads first
and rows first (`paged_decode_attention.HEADS_FIRST`), each in its best split count and tile: whether a row's
heads reading each token's KV side by side keep more of the memory system's bandwidth.

`python -m experiments.kernels.decode_attention_bench [--rows 64,128,256] [--fp8]
[--launches [--stages 2,3] [--registers 0,128]] [--orders] [--fp8-pairs]`"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from functools import partial

import torch
import triton
from flash_attn import flash_attn_with_kvcache

from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.attention.flash_attn_backend import FlashAttnBackend
from nvllm.attention.paging import blocks_for
from nvllm.ops import paged_decode_attention as decode_module
from nvllm.ops.fp8_kv_cache import FP8_KV
from nvllm.ops.paged_decode_attention import (
    LONG_TILE_TOKENS,
    TILE_TOKENS,
    paged_decode_attention,
    tile_tokens,
)

KV_HEADS, HEAD_DIM, BLOCK = 8, 128, 256
SCALE = HEAD_DIM**-0.5
NUM_BLOCKS = 4096
QUERY_HEADS = {"qwen3-0.6b": 16, "qwen3-8b": 32}
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (256, 1024, 2048, 4096)
FLASH_SPLITS = (1, 2, 4, 8, 16, 0)  # 0: flash-attn's own choice
TRITON_SPLITS = (1, 2, 4, 8, 16, 32)
TILES = (TILE_TOKENS, LONG_TILE_TOKENS)
MAX_PROGRAMS = 4096  # Triton split counts past this many (row, KV head, split) programs are not tried


def random_caches() -> tuple[torch.Tensor, torch.Tensor]:
    """A bf16 K and V cache of `NUM_BLOCKS` blocks, the same random values in every run."""
    torch.manual_seed(0)
    k_cache = torch.randn(NUM_BLOCKS, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    return k_cache, torch.randn_like(k_cache)


def decode_cases(batch_rows: tuple[int, ...]) -> Iterator[tuple]:
    """Per model, batch size and context length that fit the cache: (model, rows, context, query, block
    tables, KV lengths), each row's length drawn from [context / 2, context] over randomly placed blocks."""
    for model, heads in QUERY_HEADS.items():
        for rows in batch_rows:
            for context in CONTEXTS:
                width = blocks_for(context, BLOCK)
                if rows * width > NUM_BLOCKS:
                    continue
                query = torch.randn(rows, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
                tables = torch.randperm(NUM_BLOCKS, device="cuda")[: rows * width].to(torch.int32)
                tables = tables.view(rows, width)
                seqlens = torch.randint(context // 2, context + 1, (rows,), dtype=torch.int32, device="cuda")
                yield model, rows, context, query, tables, seqlens


def triton_times(query, k_cache, v_cache, seqlens, tables) -> dict[tuple[int, int], float]:
    """The Triton kernel's µs at each (split count, tile) tried for this batch."""
    by_triton = partial(paged_decode_attention, query, k_cache, v_cache, seqlens, tables, SCALE)
    return {
        (splits, tile): time_us(partial(by_triton, splits, tile))
        for splits in TRITON_SPLITS
        for tile in TILES
        if splits == 1 or query.shape[0] * KV_HEADS * splits <= MAX_PROGRAMS
    }


def main(batch_rows: tuple[int, ...]) -> None:
    k_cache, v_cache = random_caches()
    for model, rows, context, query, tables, seqlens in decode_cases(batch_rows):
        flash = {
            splits: time_us(
                partial(
                    flash_attn_with_kvcache,
                    query[:, None],
                    k_cache,
                    v_cache,
                    cache_seqlens=seqlens,
                    block_table=tables,
                    softmax_scale=SCALE,
                    causal=True,
                    num_splits=splits,
                )  # fmt: skip
            )
            for splits in FLASH_SPLITS
        }
        triton = triton_times(query, k_cache, v_cache, seqlens, tables)
        gb = float(seqlens.sum()) * KV_HEADS * HEAD_DIM * 2 * k_cache.element_size() / 1e9
        best_flash, best_triton = min(flash, key=flash.get), min(triton, key=triton.get)
        print(
            f"{model} {rows:3d} rows x up to {context:4d} tokens ({gb * 1e3:6.1f} MB): flash-attn "
            + " ".join(f"{s}:{us:.1f}" for s, us in flash.items())
            + " | Triton (splits, tile) "
            + " ".join(f"{s}/{tile}:{us:.1f}" for (s, tile), us in triton.items())
            + f" | best flash {best_flash} {flash[best_flash]:.1f} us, Triton {best_triton} "
            f"{triton[best_triton]:.1f} us ({gb / triton[best_triton] * 1e3:.2f} TB/s)",
            flush=True,
        )


def best_triton_us(query, k_cache, v_cache, seqlens, tables) -> tuple[float, tuple[int, int]]:
    """The Triton kernel's least time over its split counts and tiles, and the (splits, tile) it took."""
    times = triton_times(query, k_cache, v_cache, seqlens, tables)
    best = min(times, key=times.get)
    return times[best], best


FASTEST_SHOWN = 4  # launches listed a case, fastest first
# splits 0: the backend's own count (`FlashAttnBackend.decode_kv_splits`); each split count and tile is a
# kernel of its own to compile, so the default grid keeps to the launches worth comparing
# registers 0: the compiler's choice (`paged_decode_attention.MAX_REGISTERS`'s None)
LAUNCH_GRID = {"splits": (0,), "tiles": (64, 128), "warps": (4, 8), "stages": (2, 3, 4), "registers": (0,)}


def launch_times(query, k_cache, v_cache, seqlens, tables, grid) -> dict[tuple[int, ...], float]:
    """The Triton kernel's µs at each (splits, tile, warps, stages, registers) of `grid` its shared memory
    holds."""
    rows = query.shape[0]
    by_triton = partial(paged_decode_attention, query, k_cache, v_cache, seqlens, tables, SCALE)
    times = {}
    for splits, tile, warps, stages, registers in itertools.product(*(grid[axis] for axis in LAUNCH_GRID)):
        splits = splits or FlashAttnBackend.decode_kv_splits(rows, KV_HEADS)
        if splits > 1 and rows * KV_HEADS * splits > MAX_PROGRAMS:
            continue
        try:
            times[splits, tile, warps, stages, registers] = time_us(
                partial(by_triton, splits, tile, num_warps=warps, num_stages=stages, max_registers=registers)
            )
        except triton.runtime.errors.OutOfResources:  # too many stages for shared memory
            continue
    return times


def default_launch(rows: int, fp8_cache: bool) -> tuple[int, ...]:
    """The (splits, tile, warps, stages, registers) decode launches with today."""
    splits = FlashAttnBackend.decode_kv_splits(rows, KV_HEADS)
    tile = tile_tokens(rows, KV_HEADS, splits)
    return splits, tile, *decode_module.warps_and_stages(fp8_cache, tile), decode_module.MAX_REGISTERS or 0


def launches_main(batch_rows: tuple[int, ...], grid: dict[str, tuple[int, ...]]) -> None:
    k_cache, v_cache = random_caches()
    caches = {"bf16": (k_cache, v_cache), "fp8": (k_cache.to(FP8_KV), v_cache.to(FP8_KV))}
    for model, rows, context, query, tables, seqlens in decode_cases(batch_rows):
        parts = []
        for cache_name, (keys, values) in caches.items():
            gb = float(seqlens.sum()) * KV_HEADS * HEAD_DIM * 2 * keys.element_size() / 1e9
            times = launch_times(query, keys, values, seqlens, tables, grid)
            default = default_launch(rows, keys.dtype == FP8_KV)
            if default not in times:
                times[default] = time_us(
                    partial(paged_decode_attention, query, keys, values, seqlens, tables, SCALE, *default[:2])
                )
            fastest = sorted(times, key=times.get)[:FASTEST_SHOWN]
            parts.append(
                f"{cache_name} default {default} {times[default]:.1f} us "
                f"({gb / times[default] * 1e3:.2f} TB/s), fastest "
                + ", ".join(f"{at} {times[at]:.1f} us ({gb / times[at] * 1e3:.2f} TB/s)" for at in fastest)
            )
        print(f"{model} {rows:3d} rows x up to {context:4d} tokens: " + " | ".join(parts), flush=True)


FP8_CONVERSIONS = {  # (FP8_ELEMENT_PAIRS, STAGE_FP8_VALUES) of paged_decode_attention
    "pairs": (True, True),
    "value words staged": (False, True),
    "in the dots' layouts": (False, False),
}
FP8_LAUNCHES = [(tile, stages) for tile in TILES for stages in (2, 3)]


def fp8_main(batch_rows: tuple[int, ...]) -> None:
    k_cache, v_cache = random_caches()
    k_fp8, v_fp8 = k_cache.to(FP8_KV), v_cache.to(FP8_KV)
    defaults = decode_module.FP8_ELEMENT_PAIRS, decode_module.STAGE_FP8_VALUES
    for model, rows, context, query, tables, seqlens in decode_cases(batch_rows):
        splits = FlashAttnBackend.decode_kv_splits(rows, KV_HEADS)
        gb = float(seqlens.sum()) * KV_HEADS * HEAD_DIM * 2 / 1e9  # the fp8 cache's bytes
        bf16_us = time_us(
            partial(paged_decode_attention, query, k_cache, v_cache, seqlens, tables, SCALE, splits)
        )
        parts = [f"bf16 cache {bf16_us:.1f} us ({2 * gb / bf16_us * 1e3:.2f} TB/s)"]
        for name, flags in FP8_CONVERSIONS.items():
            decode_module.FP8_ELEMENT_PAIRS, decode_module.STAGE_FP8_VALUES = flags
            by_fp8 = partial(paged_decode_attention, query, k_fp8, v_fp8, seqlens, tables, SCALE, splits)
            times = {
                (tile, stages): time_us(partial(by_fp8, tile, num_stages=stages))
                for tile, stages in FP8_LAUNCHES
            }
            default_us = time_us(by_fp8)
            best = min(times, key=times.get)
            parts.append(
                f"fp8 {name} {default_us:.1f} us ({gb / default_us * 1e3:.2f} TB/s), best (tile, stages) "
                f"{best} {times[best]:.1f} us"
            )
        decode_module.FP8_ELEMENT_PAIRS, decode_module.STAGE_FP8_VALUES = defaults
        print(
            f"{model} {rows:3d} rows x up to {context:4d} tokens, {splits} splits: " + " | ".join(parts),
            flush=True,
        )


GRID_ORDERS = {"heads first": True, "rows first": False}


def orders_main(batch_rows: tuple[int, ...]) -> None:
    k_cache, v_cache = random_caches()
    caches = {"bf16": (k_cache, v_cache), "fp8": (k_cache.to(FP8_KV), v_cache.to(FP8_KV))}
    default_order = decode_module.HEADS_FIRST
    for model, rows, context, query, tables, seqlens in decode_cases(batch_rows):
        parts = []
        for cache_name, (keys, values) in caches.items():
            gb = float(seqlens.sum()) * KV_HEADS * HEAD_DIM * 2 * keys.element_size() / 1e9
            for order, heads_first in GRID_ORDERS.items():
                decode_module.HEADS_FIRST = heads_first
                us, at = best_triton_us(query, keys, values, seqlens, tables)
                parts.append(f"{cache_name} {order} {us:.1f} us {at} ({gb / us * 1e3:.2f} TB/s)")
        decode_module.HEADS_FIRST = default_order
        print(f"{model} {rows:3d} rows x up to {context:4d} tokens: " + " | ".join(parts), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="batch sizes, comma-separated")
    parser.add_argument("--fp8", action="store_true", help="the Triton kernel over bf16 and fp8 caches")
    parser.add_argument(
        "--launches", action="store_true", help="both caches over splits, tiles, warps, stages"
    )
    parser.add_argument("--orders", action="store_true", help="both caches, heads first and rows first")
    parser.add_argument("--fp8-pairs", action="store_true", help="an fp8 cache's elements read in pairs")
    for axis, values in LAUNCH_GRID.items():
        parser.add_argument(
            f"--{axis}", default=",".join(map(str, values)), help=f"with --launches: the {axis} tried"
        )
    args = parser.parse_args()
    if args.fp8_pairs:
        decode_module.FP8_ELEMENT_PAIRS = True
    grid = {axis: tuple(int(value) for value in getattr(args, axis).split(",")) for axis in LAUNCH_GRID}
    batch_rows = tuple(int(rows) for rows in args.rows.split(","))
    if args.orders:
        orders_main(batch_rows)
    elif args.launches:
        launches_main(batch_rows, grid)
    elif args.fp8:
        fp8_main(batch_rows)
    else:
        main(batch_rows)
