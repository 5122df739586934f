"""Qwen3-30B-A3B's experts on fp8 activations at prefill batches (the layer: quantization, sort, both matmuls,
sum), with the intermediate quantized in groups of 64 (the default), of 128, or a scale a row
(`moe_tiles.FP8_INTERMEDIATE_PER_ROW`), each at a few launch shapes of the prefill band."""
from functools import partial

import torch

from experiments.kernels.moe_bench import layer_experts, routed_batch
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import moe_tiles
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_tiles import GroupedMatmulConfig as C
from nvllm.ops.moe_triton import grouped_experts

TOKENS = (2048, 8192, 16384)
# (label, group or "rows", gate/up config, down config) for the prefill band
VARIANTS = [
    ("groups of 64, the table", 64, None, None),
    ("groups of 128", 128, C(128, 128, 8, 3), C(256, 128, 8, 3)),
    ("groups of 128", 128, C(128, 128, 4, 3), C(128, 128, 4, 3)),
    ("groups of 128", 128, C(128, 128, 8, 3), C(128, 128, 8, 3)),
    ("rows", "rows", None, None),
    ("rows", "rows", None, C(128, 256, 8, 3)),
    ("rows", "rows", None, C(256, 128, 8, 3)),
    ("rows", "rows", None, C(128, 128, 4, 4)),
    ("rows", "rows", None, C(256, 256, 8, 3)),
]
DEFAULT = moe_tiles.FP8_ACTIVATION_TILE_CONFIGS


def setup(group, gate_up, down):
    rows = group == "rows"
    moe_tiles.FP8_INTERMEDIATE_PER_ROW = rows
    size = 64 if rows else group
    moe_tiles.FP8_INTERMEDIATE_GROUP = size
    band, table_gate_up, table_down = DEFAULT[-1]
    gate_up, down = gate_up or table_gate_up, down or table_down
    # the other bands too where the table's shapes break the groups' rules (the engine runs 1,024 tokens there)
    kept = [
        entry if rows or (entry[1].block_n % size == 0 and entry[2].block_k == size) else (entry[0], gate_up, down)
        for entry in DEFAULT[:-1]
    ]
    moe_tiles.FP8_ACTIVATION_TILE_CONFIGS = (*kept, (band, gate_up, down))


def main() -> None:
    torch.manual_seed(0)
    gate_up, down, *scales = layer_experts(True)
    batches = {tokens: routed_batch(tokens) for tokens in TOKENS}
    totals = []
    for index, (label, group, gate_up_config, down_config) in enumerate(VARIANTS):
        setup(group, gate_up_config, down_config)
        shape = moe_tiles.FP8_ACTIVATION_TILE_CONFIGS[-1][1:]
        try:
            times = [
                time_us(partial(grouped_experts, x, gate_up, down, weights, ids, *scales, True))
                for x, _, weights, ids in batches.values()
            ]
            x, _, weights, ids = batches[2048]
            ours = grouped_experts(x, gate_up, down, weights, ids, *scales, True).float()
            reference = experts_reference(x, gate_up, down, weights, ids, *scales, quantize_activations=True)
            error = ((ours - reference.float()).norm() / reference.float().norm()).item()
            totals.append((sum(times), index))
            timed = ", ".join(f"{t:7.1f} us at {n}" for n, t in zip(TOKENS, times))
            print(f"{index} {label:24s} {shape}: {timed} | 2048 tokens {error:.2e} from its reference", flush=True)
        except Exception as error:  # a shape that does not fit, or a rule it breaks
            print(f"{index} {label:24s} {shape}: {type(error).__name__} {str(error)[:150]}", flush=True)
    print("BEST", min(totals)[1])


if __name__ == "__main__":
    main()
