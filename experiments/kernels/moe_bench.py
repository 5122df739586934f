"""One mixture-of-experts layer of Qwen3-30B-A3B on the GPU (hidden 2048, 128 experts of 768, 8 a token,
bf16): `nvllm::fused_experts`' Triton path (the sort by expert and the two grouped matmuls) over batch
sizes from a single stream to a prefill chunk, each time one call inside a CUDA graph with its inputs read
from memory (`experiments.kernels.skinny_matmul_bench.time_us`), against the bytes of the experts the
batch touches (counted from its routing, uniform random logits; beside the expected count
E * (1 - (1 - k/E)^n)).

`python -m experiments.kernels.moe_bench`"""

from __future__ import annotations

from functools import partial

import torch

from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops.moe_routing import route
from nvllm.ops.moe_triton import grouped_experts, row_tile

HIDDEN, NUM_EXPERTS, TOP_K, INTERMEDIATE = 2048, 128, 8, 768
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192)


def random_experts() -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's packed `[gate; up]` and down weights of every expert, random, bf16, on the GPU."""
    gate_up = torch.randn(NUM_EXPERTS, 2 * INTERMEDIATE, HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.02
    down = torch.randn(NUM_EXPERTS, HIDDEN, INTERMEDIATE, device="cuda", dtype=torch.bfloat16) * 0.02
    return gate_up, down


def routed_batch(tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`tokens` random hidden states, and their routing weights and experts from uniform random logits."""
    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(tokens, NUM_EXPERTS, device="cuda", dtype=torch.bfloat16)
    weights, ids = route(logits, TOP_K, renormalize=True)
    return x, weights, ids


def main() -> None:
    torch.manual_seed(0)
    gate_up, down = random_experts()
    expert_bytes = 3 * HIDDEN * INTERMEDIATE * gate_up.element_size()
    for tokens in TOKENS:
        x, weights, ids = routed_batch(tokens)
        touched = ids.unique().numel()
        expected = NUM_EXPERTS * (1 - (1 - TOP_K / NUM_EXPERTS) ** tokens)
        us = time_us(partial(grouped_experts, x, gate_up, down, weights, ids))
        gb = touched * expert_bytes / 1e9
        tflops = 2 * tokens * TOP_K * 3 * HIDDEN * INTERMEDIATE / us / 1e6
        tile = row_tile(tokens * TOP_K, NUM_EXPERTS)
        print(
            f"{tokens:5d} tokens (tile {tile:2d} rows): {touched:3d} experts touched ({expected:5.1f} "
            f"expected), {gb * 1e3:6.1f} MB, {us:7.1f} us, "
            f"{gb / us * 1e3:5.2f} TB/s, {tflops:6.1f} TFLOP/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
