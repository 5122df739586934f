"""Starts `nvllm run` (argv after the threshold) with 32-row tiles for fp8 experts above THRESHOLD pairs an
expert, up to 64, their launch shape the (16, 64] band's; a candidate for the tables, not the engine's code."""
import sys

import nvllm.ops.moe_route_triton as route
import nvllm.ops.moe_tiles as tiles
import nvllm.ops.moe_triton as grouped

threshold = float(sys.argv.pop(1))
G = tiles.GroupedMatmulConfig
original = tiles.row_tile


def row_tile(num_pairs, num_experts):
    return 32 if threshold < num_pairs / num_experts <= 64 else original(num_pairs, num_experts)


grouped.row_tile = route.row_tile = row_tile


def split(table, upper):
    rows = list(table)
    below16 = next(i for i, row in enumerate(rows) if row[0] == 16)
    rows.insert(below16, (threshold, *rows[below16][1:]))
    rows[below16 + 1] = (16, *upper)
    return tuple(rows)


tiles.TILE_CONFIGS = split(tiles.TILE_CONFIGS, tiles.TILE_CONFIGS[3][1:])
tiles.FP8_TILE_CONFIGS = split(tiles.FP8_TILE_CONFIGS, tiles.FP8_TILE_CONFIGS[3][1:])
tiles.FP8_ACTIVATION_TILE_CONFIGS = split(tiles.FP8_ACTIVATION_TILE_CONFIGS, tiles.FP8_ACTIVATION_TILE_CONFIGS[3][1:])
print("tables:", tiles.FP8_TILE_CONFIGS, [row_tile(p * 8, 128) for p in (64, 128, 160, 192, 256, 512)], flush=True)
from nvllm.cli import run

run(sys.argv[1:])
