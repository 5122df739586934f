"""One mixture-of-experts layer of Qwen3-30B-A3B on the GPU (hidden 2048, 128 experts of 768, 8 a token,
bf16; `--fp8`: the experts in fp8 with a scale per row, as `model.quantization=fp8` holds them):
`nvllm::fused_experts`' Triton path (the sort by expert and the two grouped matmuls) over batch sizes from
a single stream to a prefill chunk, each time one call inside a CUDA graph with its inputs read from memory
(`experiments.kernels.skinny_matmul_bench.time_us`), against the bytes of the experts the batch touches
(counted from its routing, uniform random logits; beside the expected count E * (1 - (1 - k/E)^n)).

`--move-bits` has the grouped matmuls convert fp8 experts by moving bits (`nvllm.ops.e4m3_to_bf16`; the
skinny experts multiply in fp32 and always take Triton's conversion);
`--fp8-activations` has fp8 experts multiply fp8 activations (`nvllm.ops.moe_fp8_triton`, the input's
quantization kernel included in the time); `--gate-up-bf16` and `--down-fp16` set which of fp8 experts'
matmuls read their bf16 input as fp16 rows (`nvllm.ops.moe_triton.GATE_UP_IN_FP16`, `DOWN_IN_FP16`; the
conversion's kernel included in the time); `--pairs-fp32` has down write each pair's output in fp32, not
bf16 (`nvllm.ops.moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE` off).

`--skinny`: at batches of at most `SKINNY_TOKENS` tokens, beside the grouped path, the skinny experts
(`nvllm.ops.moe_skinny_triton`: two launches, no sort) given the routing (and their gate/up launch alone,
so that the down launch's share shows), and routed in their kernels from the logits against the routing
kernel followed by the grouped path (`nvllm::routed_experts`' two ways); and at one token with its padding
row (a single stream's graph) and at two tokens, each of its two kernels' launch shapes from a grid, the
fastest printed to paste.

`python -m experiments.kernels.moe_bench [--fp8 [--move-bits] [--gate-up-bf16] [--down-fp16] | --fp8
--fp8-activations] [--skinny] [--pairs-fp32]`"""

from __future__ import annotations

import argparse
import itertools
from functools import partial

import torch
import triton

from experiments.kernels.fp8_arguments import add_fp8_arguments, convert_as_asked
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import moe_skinny_triton
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_route_tokens_triton import route_tokens
from nvllm.ops.moe_routing import padding_to_no_expert, route
from nvllm.ops.moe_skinny_triton import skinny_experts, skinny_gate_up
from nvllm.ops.moe_tiles import row_tile
from nvllm.ops.moe_triton import grouped_experts

HIDDEN, NUM_EXPERTS, TOP_K, INTERMEDIATE = 2048, 128, 8, 768
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192)
SKINNY_TOKENS = 8
# each skinny kernel's launch shapes (BLOCK_N, BLOCK_K, num_warps, num_stages) to sweep. A program's products
# are an fp32 tile in registers: gate/up's two [BLOCK_N, BLOCK_K], down's [TOP_K, BLOCK_N, BLOCK_K] (its
# token's experts side by side); tiles past 64 fp32 registers a thread are left out
SKINNY_GRIDS = {
    "GATE_UP_LAUNCH": [
        launch
        for launch in itertools.product((2, 4, 8, 16), (256, 512, 1024, 2048), (4, 8), (1,))
        if 2 * launch[0] * launch[1] <= 64 * 32 * launch[2]
    ],
    "DOWN_LAUNCH": [
        launch
        for launch in itertools.product((1, 2, 4, 8), (256, 512, 1024), (4, 8), (1,))
        if TOP_K * launch[0] * launch[1] <= 64 * 32 * launch[2]
    ],
}


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


def routed_batch(
    tokens: int, padding: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`tokens` random hidden states, uniform random router logits, and their routing weights and experts;
    the last `padding` of them padding rows, routed as the engine routes them
    (`nvllm.ops.moe_routing.padding_to_no_expert`)."""
    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(tokens, NUM_EXPERTS, device="cuda", dtype=torch.bfloat16)
    weights, ids = route(logits, TOP_K, renormalize=True)
    if padding:
        is_padding = torch.arange(tokens, device="cuda") >= tokens - padding
        weights, ids = padding_to_no_expert(weights, ids, is_padding, NUM_EXPERTS)
    return x, logits, weights, ids


def routed_then_grouped(x, gate_up, down, logits, *scales):
    """`nvllm::routed_experts`' grouped way: the routing kernel, then the sort and the grouped matmuls."""
    weights, ids = route_tokens(logits, None, TOP_K, True)
    return grouped_experts(x, gate_up, down, weights, ids, *scales)


def skinny_times(x, gate_up, down, logits, weights, ids, scales) -> str:
    """The skinny experts' µs given the routing (and of that, the gate/up launch alone), and routed in
    their kernels against the routing kernel followed by the grouped path."""
    quantized = dict(gate_up_scale=scales[0], down_scale=scales[1])
    given = time_us(partial(skinny_experts, x, gate_up, down, TOP_K, routing=(weights, ids), **quantized))
    gate_up_only = time_us(
        partial(skinny_gate_up, x, gate_up, TOP_K, routing=(weights, ids), gate_up_scale=scales[0])
    )
    here = time_us(partial(skinny_experts, x, gate_up, down, TOP_K, router_logits=logits, **quantized))
    grouped = time_us(partial(routed_then_grouped, x, gate_up, down, logits, *scales))
    return (
        f"skinny {given:6.1f} us (gate/up alone {gate_up_only:6.1f}); routed in the kernels {here:6.1f} us "
        f"against {grouped:6.1f} us"
    )


def sweep_skinny_launches(gate_up, down, scales) -> None:
    """Each table of `SKINNY_GRIDS` (the kernels' launch shapes) over its grid, at the batches a single
    stream and two streams run (one token and its padding row, two tokens), the other table at its entry;
    the fastest summed over both, printed to paste into the table's entry for these weights."""
    best = {}
    weight_bytes = gate_up.element_size()
    for name in SKINNY_GRIDS:
        table = getattr(moe_skinny_triton, name)
        chosen = table[weight_bytes]
        timed = []
        for launch in SKINNY_GRIDS[name]:
            table[weight_bytes] = launch
            total = 0.0
            try:
                for padding in (1, 0):
                    x, logits, weights, ids = routed_batch(2, padding)
                    quantized = dict(gate_up_scale=scales[0], down_scale=scales[1])
                    routing = (weights, ids)
                    total += time_us(
                        partial(skinny_experts, x, gate_up, down, TOP_K, routing=routing, **quantized)
                    )
            except triton.runtime.errors.OutOfResources:  # too large a tile for the SM
                continue
            timed.append((total, launch))
            print(f"{name}[{weight_bytes}] {launch}: {total:6.1f} us at 1 (padded) + 2 tokens", flush=True)
        table[weight_bytes] = chosen
        best[name] = min(timed)
    for name, (total, launch) in best.items():
        print(f"{name}[{weight_bytes}] = {launch}  # {total:.1f} us at 1 (padded) + 2 tokens")


def main(fp8: bool, fp8_activations: bool = False, skinny: bool = False) -> None:
    torch.manual_seed(0)
    gate_up, down, *scales = layer_experts(fp8)
    one_expert = expert_bytes(gate_up, down, *scales)
    for tokens in TOKENS:
        x, logits, weights, ids = routed_batch(tokens)
        touched = ids.unique().numel()
        expected = NUM_EXPERTS * (1 - (1 - TOP_K / NUM_EXPERTS) ** tokens)
        us = time_us(partial(grouped_experts, x, gate_up, down, weights, ids, *scales, fp8_activations))
        gb = touched * one_expert / 1e9
        tflops = 2 * tokens * TOP_K * 3 * HIDDEN * INTERMEDIATE / us / 1e6
        tile = row_tile(tokens * TOP_K, NUM_EXPERTS, fp8_activations)
        print(
            f"{tokens:5d} tokens (tile {tile:2d} rows): {touched:3d} experts touched ({expected:5.1f} "
            f"expected), {gb * 1e3:6.1f} MB, {us:7.1f} us, "
            f"{gb / us * 1e3:5.2f} TB/s, {tflops:6.1f} TFLOP/s",
            flush=True,
        )
        if skinny and tokens <= SKINNY_TOKENS:
            print(f"      {skinny_times(x, gate_up, down, logits, weights, ids, scales)}", flush=True)
    if skinny:
        sweep_skinny_launches(gate_up, down, scales)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fp8_arguments(parser, "experts", activations=True)
    parser.add_argument("--skinny", action="store_true", help="the skinny experts beside (few tokens)")
    args = parser.parse_args()
    convert_as_asked(parser, args)
    main(args.fp8, args.fp8_activations, args.skinny)
