"""Decode attention at Qwen3-30B-A3B's heads (32 queries over 4 KV heads of 128, an fp8 cache in blocks of
256) on the rows of nano-vllm's bench: 256 rows whose prompts are uniform in [100, 1024] tokens, at the first
decode step and after 256 and 512 more. The backend cuts no split at 256 rows (`decode_kv_splits`: 1,024
programs), so a step's time may be its longest rows' programs; here the kernel at 1, 2 and 4 splits and at
both tiles, µs in a CUDA graph with the KV read from memory, and the rate of the KV's bytes."""

from functools import partial

import torch

from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.attention.paging import blocks_for
from nvllm.ops.fp8_kv_cache import FP8_KV
from nvllm.ops.paged_decode_attention import paged_decode_attention

ROWS, QUERY_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 256, 32, 4, 128, 256
SCALE = HEAD_DIM**-0.5


def main() -> None:
    torch.manual_seed(0)
    prompts = torch.randint(100, 1025, (ROWS,), dtype=torch.int32, device="cuda")
    width = blocks_for(1024 + 512 + 1, BLOCK)
    num_blocks = ROWS * width
    k_cache = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, device="cuda").to(FP8_KV)
    v_cache = torch.randn_like(k_cache, dtype=torch.float32).to(FP8_KV)
    tables = torch.randperm(num_blocks, device="cuda").to(torch.int32).view(ROWS, width)
    query = torch.randn(ROWS, QUERY_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    for decoded in (0, 256, 512):
        seqlens = prompts + decoded + 1
        gb = float(seqlens.sum()) * KV_HEADS * HEAD_DIM * 2 / 1e9
        attend = partial(paged_decode_attention, query, k_cache, v_cache, seqlens, tables, SCALE)
        times = {
            (splits, tile): time_us(partial(attend, splits, tile))
            for splits in (1, 2, 4)
            for tile in (64, 128)
        }
        print(
            f"after {decoded:3d} decoded ({gb * 1e3:5.1f} MB of KV): "
            + ", ".join(
                f"{s} splits/{t}: {us:5.1f} us ({gb / us * 1e3:.2f} TB/s)" for (s, t), us in times.items()
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
