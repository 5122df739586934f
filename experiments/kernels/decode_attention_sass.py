"""The decode attention kernel's machine code for Hopper (sm_90), compiled here with no GPU: per cache dtype
(bf16, fp8) and tile, the instructions of its main loop by kind, its registers a thread and its shared
memory, from Triton's own ptxas and nvdisasm: what a loop iteration costs in instructions against the bytes
it reads (over an fp8 cache half the bytes of a bf16 one a token). Instructions are not time: a loop with
fewer of them can still be slower (experiments/results/2026-12-03-h200-fp8-decode-tiles.md), so this says
where to look, and the GPU (`decode_attention_bench --fp8`) says what pays.

`python -m experiments.kernels.decode_attention_sass [--tiles 64,128] [--group 2] [--top 16] [--keep DIR]
[--fp8-in-dot-layout | --fp8-pairs]`
(needs a Triton with its NVIDIA backend, as pip installs it; no GPU)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import triton
import triton.language as tl

from experiments.kernels.hopper_sass import (
    compile_for_hopper,
    disassemble,
    main_loop_instructions,
    resource_usage,
)
from nvllm.ops import paged_decode_attention as decode_module

KV_HEADS, HEAD_DIM, BLOCK = 8, 128, 256
ALIGNED = (  # arguments a launch on real tensors finds 16-byte aligned (or divisible by 16), as Triton does
    "query_ptr k_cache_ptr v_cache_ptr block_tables_ptr seqlens_ptr out_ptr lse_ptr query_row_stride "
    "query_head_stride out_row_stride out_head_stride block_table_stride"
).split()


def compile_kernel(cache: str, group: int, tile: int, num_warps: int = 4, num_stages: int = 2):
    """The kernel compiled for sm_90 over a cache of `cache` ("bf16" or "fp8"), one split, PDL on."""
    fp8 = cache == "fp8"
    signature = {
        "query_ptr": "*bf16",
        "k_cache_ptr": "*fp8e4nv" if fp8 else "*bf16",
        "v_cache_ptr": "*fp8e4nv" if fp8 else "*bf16",
        "block_tables_ptr": "*i32",
        "seqlens_ptr": "*i32",
        "out_ptr": "*bf16",
        "lse_ptr": "*fp32",
        "query_row_stride": "i32",
        "query_head_stride": "i32",
        "out_row_stride": "i32",
        "out_head_stride": "i32",
        "block_table_stride": "i32",
        "scale": "fp32",
    }
    constants = {
        "BLOCK_SIZE": BLOCK,
        "NUM_KV_HEADS": KV_HEADS,
        "GROUP": group,
        "GROUP_ROWS": max(decode_module.MIN_QUERY_ROWS, triton.next_power_of_2(group)),
        "HEAD_DIM": HEAD_DIM,
        "BLOCK_N": tile,
        "NUM_SPLITS": 1,
        "DOT_DTYPE": tl.float16 if fp8 else tl.bfloat16,
        "STAGED_FP8_VALUES": fp8 and decode_module.STAGE_FP8_VALUES,
        "FP8_PAIRS": fp8 and decode_module.FP8_ELEMENT_PAIRS,
        "IN_PTX": True,
        "HEADS_FIRST": decode_module.HEADS_FIRST,
        "PDL": True,
    }
    return compile_for_hopper(
        decode_module._paged_decode_kernel, signature, constants, ALIGNED, num_warps, num_stages
    )


def main(tiles: tuple[int, ...], group: int, top: int, keep: Path | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for tile in tiles:
            for cache in ("bf16", "fp8"):
                kernel = compile_kernel(cache, group, tile)
                directory = keep / f"{cache}-group{group}-tile{tile}" if keep else Path(scratch)
                directory.mkdir(parents=True, exist_ok=True)
                sass, usage = disassemble(kernel.asm["cubin"], directory)
                if keep:
                    (directory / "kernel.sass").write_text(sass)
                    (directory / "kernel.ttgir").write_text(kernel.asm["ttgir"])
                loop = main_loop_instructions(sass)
                registers = resource_usage(usage).get("REG", "?")
                tile_bytes = 2 * tile * HEAD_DIM * (1 if cache == "fp8" else 2)  # K and V, one KV head
                total = sum(loop.values())
                print(
                    f"{cache} cache, group {group}, tile {tile}: loop {total} instructions a warp for "
                    f"{tile_bytes // 1024} KiB ({total / tile:.2f} a token), "
                    f"{registers} registers, "
                    f"{kernel.metadata.shared} B shared | "
                    + ", ".join(f"{op} {count}" for op, count in loop.most_common(top)),
                    flush=True,
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", default="64,128", help="KV tokens a loop iteration, comma-separated")
    parser.add_argument("--group", type=int, default=2, help="query heads a KV head (0.6B: 2, 8B: 4)")
    parser.add_argument("--top", type=int, default=16, help="opcodes listed a kernel")
    parser.add_argument("--keep", type=Path, help="write each kernel's SASS and TTGIR under this directory")
    parser.add_argument(
        "--fp8-in-dot-layout", action="store_true", help="fp8 value tiles converted in the dot's layout"
    )
    parser.add_argument("--fp8-pairs", action="store_true", help="an fp8 cache's elements read in pairs")
    args = parser.parse_args()
    decode_module.STAGE_FP8_VALUES = not args.fp8_in_dot_layout
    decode_module.FP8_ELEMENT_PAIRS = args.fp8_pairs
    main(tuple(int(tile) for tile in args.tiles.split(",")), args.group, args.top, args.keep)
