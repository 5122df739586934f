"""A batch's mixture-of-experts routing on the GPU, Qwen3-30B-A3B's router (128 experts, 8 a token, bf16
logits, renormalised, with a padding mask): the path before the fused kernel — the softmax, sort and slices
as inductor compiles `route_step`, then `align_by_expert`'s kernel — and the same in eager torch, against
the one fused kernel (`route_and_align`) where the batch fits it. Larger batches (256, 1024 tokens) are
routed inside `nvllm::routed_experts` (`model.moe_routing_kernel=true`) by a program per block of tokens
(`route_tokens`), then sorted by `align_by_expert`: their rows time that beside inductor's kernels. Each
time is one call in a CUDA graph with its inputs read from memory
(`experiments.kernels.skinny_matmul_bench.time_us`).

`python -m experiments.kernels.moe_routing_bench`"""

from __future__ import annotations

from functools import partial

import torch

from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_route_tokens_triton import route_tokens
from nvllm.ops.moe_route_triton import fits_fused_routing, route_and_align
from nvllm.ops.moe_routing import route_step
from nvllm.ops.moe_tiles import row_tile

NUM_EXPERTS, TOP_K = 128, 8
TOKENS = (1, 8, 64, 256, 1024)


def torch_routing(route, logits: torch.Tensor, padding: torch.Tensor, block_m: int):
    """`route` (`route_step` compiled or not, or `route_tokens`), then the sort by expert: the path before
    the fused kernel, or the one of batches past its limit."""
    _, ids = route(logits, padding, TOP_K, True)
    return align_by_expert(ids, NUM_EXPERTS, block_m)


def main() -> None:
    torch.manual_seed(0)
    compiled_route = torch.compile(route_step, fullgraph=True, dynamic=False)
    for tokens in TOKENS:
        logits = torch.randn(tokens, NUM_EXPERTS, device="cuda", dtype=torch.bfloat16)
        padding = torch.zeros(tokens, dtype=torch.bool, device="cuda")
        block_m = row_tile(tokens * TOP_K, NUM_EXPERTS)
        times = {
            "inductor+align": time_us(partial(torch_routing, compiled_route, logits, padding, block_m)),
            "eager+align": time_us(partial(torch_routing, route_step, logits, padding, block_m)),
        }
        if fits_fused_routing(tokens, NUM_EXPERTS):
            times["fused"] = time_us(partial(route_and_align, logits, padding, TOP_K, True, block_m))
        else:
            times["tokens+align"] = time_us(partial(torch_routing, route_tokens, logits, padding, block_m))
        report = ", ".join(f"{name} {us:6.1f} us" for name, us in times.items())
        print(f"{tokens:3d} tokens: {report}", flush=True)


if __name__ == "__main__":
    main()
