"""The sort by expert in one launch and in chunks (`moe_align_triton.ALIGN_IN_CHUNKS_MIN_PAIRS`), each
layout checked equal to the other, and the sum of the pairs from fp32 pairs and from bf16 ones
(`moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`), µs at Qwen3-30B-A3B's shapes (128 experts, 8 a token)."""
from functools import partial

import torch

from experiments.kernels.moe_bench import routed_batch
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import moe_align_triton, moe_tiles
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_triton import sum_pairs

TOKENS = (64, 256, 512, 1024, 2048, 4096, 8192, 16384)


def main() -> None:
    torch.manual_seed(0)
    for tokens in TOKENS:
        x, _, _, ids = routed_batch(tokens, padding=tokens // 8)
        times, layouts = {}, {}
        for label, threshold in (("one launch", 10**9), ("chunks", 0)):
            moe_align_triton.ALIGN_IN_CHUNKS_MIN_PAIRS = threshold
            for quantized in (False, True):
                block_m = moe_tiles.row_tile(ids.numel(), 128, quantized)
                layouts[label, block_m] = align_by_expert(ids, 128, block_m)
            times[label] = time_us(partial(align_by_expert, ids, 128, block_m))
        same = all(
            torch.equal(a, b)
            for (label, block_m), layout in layouts.items()
            if label == "chunks"
            for a, b in zip(layout, layouts["one launch", block_m])
        )
        pairs = torch.randn(ids.numel(), x.shape[1], device=x.device)
        fp32_sum = time_us(partial(sum_pairs, pairs, ids, 128, x.dtype))
        bf16_sum = time_us(partial(sum_pairs, pairs.to(torch.bfloat16), ids, 128, x.dtype))
        print(
            f"{tokens:6d} tokens: align in one launch {times['one launch']:7.1f} us, in chunks "
            f"{times['chunks']:6.1f} us, layouts equal {same}; sum of fp32 pairs {fp32_sum:6.1f} us, of bf16 "
            f"pairs {bf16_sum:6.1f} us",
            flush=True,
        )


if __name__ == "__main__":
    main()
