"""Qwen3-30B-A3B's experts on fp8 activations at prefill batches, the intermediate a scale a row (the
default): the layer at the prefill band's table shapes, then at down shapes around the table's and a few
gate/up shapes, each with its error from its reference."""
import itertools
import math
from functools import partial

import torch

from experiments.kernels.moe_bench import layer_experts, routed_batch
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import moe_tiles
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_tiles import GroupedMatmulConfig as C
from nvllm.ops.moe_triton import grouped_experts

TOKENS = (2048, 8192)
TABLE = moe_tiles.FP8_ACTIVATION_TILE_CONFIGS
_, TABLE_GATE_UP, TABLE_DOWN = TABLE[-1]
DOWNS = [C(n, k, w, s) for n, k, w, s in itertools.product((64, 128, 256), (128, 256), (4, 8), (3, 4))]
GATE_UPS = [C(128, 128, 8, 3), C(64, 256, 4, 3), C(128, 128, 4, 3), C(64, 128, 8, 4)]
VARIANTS = [(TABLE_GATE_UP, TABLE_DOWN)] + [(TABLE_GATE_UP, d) for d in DOWNS if d != TABLE_DOWN]
VARIANTS += [(g, TABLE_DOWN) for g in GATE_UPS]


def main() -> None:
    assert moe_tiles.FP8_INTERMEDIATE_PER_ROW
    torch.manual_seed(0)
    gate_up, down, *scales = layer_experts(True)
    batches = {tokens: routed_batch(tokens) for tokens in TOKENS}
    results = []
    for index, (gate_up_config, down_config) in enumerate(VARIANTS):
        moe_tiles.FP8_ACTIVATION_TILE_CONFIGS = (*TABLE[:-1], (math.inf, gate_up_config, down_config))
        label = f"{index:2d} gate/up {tuple(vars(gate_up_config).values())} down {tuple(vars(down_config).values())}"
        try:
            times = [
                time_us(partial(grouped_experts, x, gate_up, down, weights, ids, *scales, True))
                for x, _, weights, ids in batches.values()
            ]
            x, _, weights, ids = batches[2048]
            ours = grouped_experts(x, gate_up, down, weights, ids, *scales, True).float()
            reference = experts_reference(x, gate_up, down, weights, ids, *scales, quantize_activations=True)
            error = ((ours - reference.float()).norm() / reference.float().norm()).item()
            results.append((sum(times), label))
            timed = ", ".join(f"{t:7.1f} us at {n}" for n, t in zip(TOKENS, times))
            print(f"{label}: {timed} | {error:.2e}", flush=True)
        except Exception as error:
            print(f"{label}: {type(error).__name__} {str(error)[:100]}", flush=True)
    for total, label in sorted(results)[:5]:
        print(f"FASTEST {total:8.1f} us {label}")


if __name__ == "__main__":
    main()
