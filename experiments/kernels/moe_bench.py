"""One mixture-of-experts layer of Qwen3-30B-A3B on the GPU (hidden 2048, 128 experts of 768, 8 a token,
bf16; `--fp8`: the experts in fp8 with a scale per row, as `model.quantization=fp8` holds them):
`nvllm::fused_experts`' Triton path (the sort by expert and the two grouped matmuls) over batch sizes from
a single stream to a prefill chunk, each time one call inside a CUDA graph with its inputs read from memory
(`experiments.kernels.skinny_matmul_bench.time_us`), against the bytes of the experts the batch touches
(counted from its routing, uniform random logits; beside the expected count E * (1 - (1 - k/E)^n)).

`--move-bits` has the kernels convert fp8 experts by moving bits (`nvllm.ops.e4m3_to_bf16`);
`--fp8-activations` has fp8 experts multiply fp8 activations (`nvllm.ops.moe_fp8_triton`, the input's
quantization kernel included in the time).

`python -m experiments.kernels.moe_bench [--fp8 [--move-bits | --fp8-activations]]`"""

from __future__ import annotations

import argparse
from functools import partial

import torch

from experiments.kernels.fp8_arguments import add_fp8_arguments, convert_as_asked
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_routing import route
from nvllm.ops.moe_tiles import row_tile
from nvllm.ops.moe_triton import grouped_experts

HIDDEN, NUM_EXPERTS, TOP_K, INTERMEDIATE = 2048, 128, 8, 768
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192)


def random_experts() -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's packed `[gate; up]` and down weights of every expert, random, bf16, on the GPU."""
    gate_up = torch.randn(NUM_EXPERTS, 2 * INTERMEDIATE, HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.02
    down = torch.randn(NUM_EXPERTS, HIDDEN, INTERMEDIATE, device="cuda", dtype=torch.bfloat16) * 0.02
    return gate_up, down


def layer_experts(fp8: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """`random_experts`, with `fp8` quantized a scale per row: gate/up, down and their scales (None in
    bf16); and the bytes an expert's weights and scales take."""
    gate_up, down = random_experts()
    if not fp8:
        return gate_up, down, None, None
    (gate_up, gate_up_scale), (down, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    return gate_up, down, gate_up_scale, down_scale


def expert_bytes(*stacked: torch.Tensor | None) -> int:
    """The bytes one expert's share of the stacked tensors `[E, ...]` takes (weights, and their scales
    where quantized; None: no scales)."""
    return sum(t[0].numel() * t.element_size() for t in stacked if t is not None)


def routed_batch(tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`tokens` random hidden states, and their routing weights and experts from uniform random logits."""
    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(tokens, NUM_EXPERTS, device="cuda", dtype=torch.bfloat16)
    weights, ids = route(logits, TOP_K, renormalize=True)
    return x, weights, ids


def main(fp8: bool, fp8_activations: bool = False) -> None:
    torch.manual_seed(0)
    gate_up, down, *scales = layer_experts(fp8)
    one_expert = expert_bytes(gate_up, down, *scales)
    for tokens in TOKENS:
        x, weights, ids = routed_batch(tokens)
        touched = ids.unique().numel()
        expected = NUM_EXPERTS * (1 - (1 - TOP_K / NUM_EXPERTS) ** tokens)
        us = time_us(partial(grouped_experts, x, gate_up, down, weights, ids, *scales, fp8_activations))
        gb = touched * one_expert / 1e9
        tflops = 2 * tokens * TOP_K * 3 * HIDDEN * INTERMEDIATE / us / 1e6
        tile = row_tile(tokens * TOP_K, NUM_EXPERTS)
        print(
            f"{tokens:5d} tokens (tile {tile:2d} rows): {touched:3d} experts touched ({expected:5.1f} "
            f"expected), {gb * 1e3:6.1f} MB, {us:7.1f} us, "
            f"{gb / us * 1e3:5.2f} TB/s, {tflops:6.1f} TFLOP/s",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fp8_arguments(parser, "experts", activations=True)
    args = parser.parse_args()
    convert_as_asked(parser, args)
    main(args.fp8, args.fp8_activations)
