"""How far one mixture-of-experts layer of Qwen3-30B-A3B's shape (hidden 2048, 128 experts of 768, 8 a
token) moves from float32 with its experts in bf16, in fp8 (`model.quantization=fp8`: bf16 activations),
and in fp8 on fp8 activations (`model.fp8_activations`; its intermediate a scale a row, as the engine
quantizes it, and in groups of 64 and 128 columns, `nvllm.ops.moe_tiles.FP8_INTERMEDIATE_*`): the torch
reference
(`nvllm.ops.moe_ops.experts_reference`) on random weights and gaussian hidden states, with and without a
few outlier channels (as trained models' hidden states have), on the CPU. Printed: each one's largest
per-token relative L2 error to float32.

`python -m experiments.studies.fp8_moe_layer_error [--tokens 64]`"""

from __future__ import annotations

import argparse

import torch

from nvllm.ops import moe_tiles
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_routing import route

HIDDEN, NUM_EXPERTS, TOP_K, INTERMEDIATE = 2048, 128, 8, 768
OUTLIER_CHANNELS, OUTLIER_SCALE = 8, 50
# (FP8_INTERMEDIATE_PER_ROW, FP8_INTERMEDIATE_GROUP): a scale a row, groups of 64, groups of 128
INTERMEDIATE_QUANTIZATIONS = ((True, 64), (False, 64), (False, 128))


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest per-token relative L2 distance."""
    return ((ours - reference).norm(dim=-1) / reference.norm(dim=-1)).max().item()


def main(tokens: int) -> None:
    engine_quantization = (moe_tiles.FP8_INTERMEDIATE_PER_ROW, moe_tiles.FP8_INTERMEDIATE_GROUP)
    torch.manual_seed(0)
    gate_up = torch.randn(NUM_EXPERTS, 2 * INTERMEDIATE, HIDDEN) * HIDDEN**-0.5
    down = torch.randn(NUM_EXPERTS, HIDDEN, INTERMEDIATE) * INTERMEDIATE**-0.5
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    for outliers in (False, True):
        x = torch.randn(tokens, HIDDEN)
        if outliers:
            x[:, torch.randperm(HIDDEN)[:OUTLIER_CHANNELS]] *= OUTLIER_SCALE
        weights, ids = route(torch.randn(tokens, NUM_EXPERTS), TOP_K, renormalize=True)
        exact = experts_reference(x, gate_up, down, weights, ids)
        x, weights = x.bfloat16(), weights.bfloat16()
        bf16 = experts_reference(x, gate_up.bfloat16(), down.bfloat16(), weights, ids)
        fp8_experts = (gate_up_q, down_q, weights, ids, gate_up_scale, down_scale)
        fp8 = experts_reference(x, *fp8_experts)
        errors = {"bf16": bf16, "fp8 experts": fp8}
        for per_row, group in INTERMEDIATE_QUANTIZATIONS:
            moe_tiles.FP8_INTERMEDIATE_PER_ROW, moe_tiles.FP8_INTERMEDIATE_GROUP = per_row, group
            name = "a scale a row" if per_row else f"groups of {group}"
            activations = experts_reference(x, *fp8_experts, quantize_activations=True)
            errors[f"fp8 experts on fp8 activations, the intermediate {name}"] = activations
        moe_tiles.FP8_INTERMEDIATE_PER_ROW, moe_tiles.FP8_INTERMEDIATE_GROUP = engine_quantization
        label = f"{OUTLIER_CHANNELS} channels x{OUTLIER_SCALE}" if outliers else "gaussian"
        print(
            f"{tokens} tokens, {label}: relative error to float32 (largest token): "
            + ", ".join(f"{name} {relative_error(y.float(), exact):.4f}" for name, y in errors.items())
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    main(parser.parse_args().tokens)
