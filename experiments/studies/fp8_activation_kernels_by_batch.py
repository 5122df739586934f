"""How far the fp8-activation grouped matmuls (`nvllm.ops.moe_fp8_triton`, `model.fp8_activations`) are
from the torch reference of the same quantization computed on the CPU, by batch size and launch shape, on
the GPU: the inputs of the GPU test (`tests/models/test_qwen3_moe_gpu.py`, Qwen3-30B-A3B's layer), at 64
to 4,096 tokens with the table's launch shapes; at 2,048 and 4,096 with the last band's shapes replaced by
the 16-pair band's (4 warps where the last band runs 8); at 256 and 4,096 with the row tile forced to 16, 32,
64 and 128. Each line gives the relative L2 error of the whole output and, per token, the median and the
three worst rows (the test bounds the whole and the worst): a fault between warps leaves a few rows far
off, rounding spreads evenly.

`python -m experiments.studies.fp8_activation_kernels_by_batch`"""

from __future__ import annotations

import math

import torch

from nvllm.ops import moe_tiles, moe_triton
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_ops import experts_reference
from tests.models.test_qwen3_moe_gpu import layer_inputs


def errors(num_tokens: int) -> str:
    """The kernels' distance from the CPU reference at `num_tokens` tokens, as one line."""
    x, gate_up, down, weights, ids = layer_inputs(num_tokens, seed=num_tokens)
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    x, weights = x.to(torch.bfloat16), weights.to(torch.bfloat16)
    experts = (gate_up_q, down_q, weights, ids, gate_up_scale, down_scale)
    ours = moe_triton.grouped_experts(x, *experts, True).float().cpu()
    on_cpu = [t.cpu() for t in (x, *experts)]
    reference = experts_reference(*on_cpu, quantize_activations=True).float()
    whole = ((ours - reference).norm() / reference.norm()).item()
    rows = (ours - reference).norm(dim=1) / reference.norm(dim=1)
    worst = rows.topk(3)
    worst_rows = ", ".join(
        f"{e:.4f} (row {i})" for e, i in zip(worst.values.tolist(), worst.indices.tolist())
    )
    return f"{num_tokens:5d} tokens: {whole:.4f} in all; rows' median {rows.median():.4f}, worst {worst_rows}"


def main() -> None:
    print("the table's launch shapes")
    for num_tokens in (64, 256, 512, 1024, 2048, 4096):
        print(errors(num_tokens), flush=True)
    table = moe_tiles.FP8_ACTIVATION_TILE_CONFIGS
    _, gate_up_16, down_16 = table[2]  # the band of at most 16 pairs an expert
    moe_tiles.FP8_ACTIVATION_TILE_CONFIGS = (*table[:-1], (math.inf, gate_up_16, down_16))
    print(f"the last band at the 16-pair band's shapes: {gate_up_16}, {down_16}")
    for num_tokens in (2048, 4096):
        print(errors(num_tokens), flush=True)
    moe_tiles.FP8_ACTIVATION_TILE_CONFIGS = table
    row_tiles = moe_tiles.FP8_ACTIVATION_ROW_TILES, moe_tiles.FP8_ACTIVATION_GROUP_ROW_TILES
    for rows in (16, 32, 64, 128):
        moe_tiles.FP8_ACTIVATION_ROW_TILES = moe_tiles.FP8_ACTIVATION_GROUP_ROW_TILES = (rows, rows, rows)
        print(f"row tile forced to {rows}")
        for num_tokens in (256, 4096):
            print(errors(num_tokens), flush=True)
    moe_tiles.FP8_ACTIVATION_ROW_TILES, moe_tiles.FP8_ACTIVATION_GROUP_ROW_TILES = row_tiles


if __name__ == "__main__":
    main()
