"""Decode attention on the GPU, per layer: flash-attn's decode kernel in its KV split counts against nvllm's
Triton kernel (`nvllm.ops.paged_decode_attention`) in its, over batch rows x context lengths (each row's
length drawn from [length / 2, length]), for Qwen3-0.6B's and Qwen3-8B's heads (16 and 32 queries over 8
KV heads of 128; KV blocks of 256 tokens). Each time is one call inside a CUDA graph, its KV read from
memory (`experiments.kernels.skinny_matmul_bench.time_us`); the Triton kernel's in each of its tiles (KV
tokens a
loop iteration) too. What decode's kernel (the Triton one), its split rule
(`FlashAttnBackend.decode_kv_splits`) and its tile rule (`paged_decode_attention.tile_tokens`) are chosen by.

`python -m experiments.kernels.decode_attention_bench [--rows 64,128,256]`"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from flash_attn import flash_attn_with_kvcache

from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.attention.paging import blocks_for
from nvllm.ops.paged_decode_attention import LONG_TILE_TOKENS, TILE_TOKENS, paged_decode_attention

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


def main(batch_rows: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    k_cache = torch.randn(NUM_BLOCKS, BLOCK, KV_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
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
                by_triton = partial(paged_decode_attention, query, k_cache, v_cache, seqlens, tables, SCALE)
                triton = {
                    (splits, tile): time_us(partial(by_triton, splits, tile))
                    for splits in TRITON_SPLITS
                    for tile in TILES
                    if splits == 1 or rows * KV_HEADS * splits <= MAX_PROGRAMS
                }
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="batch sizes, comma-separated")
    main(tuple(int(rows) for rows in parser.parse_args().rows.split(",")))
