"""The launch shapes of the MoE grouped matmuls (`nvllm.ops.moe_triton`, `nvllm.ops.moe_fp8_triton`): the row
tile, chosen by the mean number of (token, expert) pairs per expert (decode batches leave most experts a few
rows, prefill gives them many), and the rest of each matmul's launch shape (columns and reduction slice per
program, warps, pipeline depth) from a table by the same mean, finer banded, one table per kind of operands
(`experiments/kernels/moe_tile_sweep.py` measures them); and the settings of what the kernels round that
the torch reference (`nvllm.ops.moe_ops`) follows too (the fp8-activation intermediate's scales, the pairs'
outputs' dtype). Plain Python: the engine's config checks and the reference read it without Triton."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Rows per tile by band of the mean pairs per expert: at most 16 (decode batches), at most 64, more (prefill).
ROW_TILES = (16, 32, 64)

# The same for the matmuls on fp8 activations, which convert nothing in their loop, so a wider tile of pairs
# costs only its accumulator and reads each expert's weights half as often. Prefill's tiles are 128 pairs:
# with the tensor cores summing over the whole loop (`FP8_ACTIVATION_SUMS_IN_FP32` off) the prefill layer and
# the 30B bench were faster than at 64-pair tiles, each swept (experiments/results/
# 2026-12-06-h100-fp8-decode-and-prefill-tiles.md; slower while each slice's sums were promoted).
FP8_ACTIVATION_ROW_TILES = (16, 32, 128)

# And for the intermediate quantized in groups (`FP8_INTERMEDIATE_PER_ROW` off): its down kernel scales each
# group's sums in registers, which spill at 128-pair tiles at its table's prefill shape (sm_90, compiled on
# the CPU).
FP8_ACTIVATION_GROUP_ROW_TILES = (16, 32, 64)


def row_tile(
    num_pairs: int, num_experts: int, quantized_activations: bool = False, per_row: bool | None = None
) -> int:
    """Rows per tile for `num_pairs` (token, expert) pairs spread over `num_experts` experts, on fp8
    activations (`nvllm.ops.moe_fp8_triton`) where `quantized_activations`, their intermediate a scale a
    row (`per_row`) or in groups; None: as it is quantized now (`FP8_INTERMEDIATE_PER_ROW`)."""
    per_expert = num_pairs / num_experts
    band = 0 if per_expert <= 16 else 1 if per_expert <= 64 else 2
    if not quantized_activations:
        return ROW_TILES[band]
    return (FP8_ACTIVATION_ROW_TILES if scales_per_row(per_row) else FP8_ACTIVATION_GROUP_ROW_TILES)[band]


@dataclass(frozen=True)
class GroupedMatmulConfig:
    """A grouped matmul's launch shape besides its row tile: output columns and reduction slice per
    program, warps per program, software-pipeline depth."""

    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# (most pairs per expert, gate/up's config, down's config) by band of the mean pairs per expert; the bands
# split `row_tile`'s, so that a band has one row tile; the last has no upper end. Each the fastest of the
# sweep's grid on Qwen3-30B-A3B's layer on an H200 (experiments/results/2026-12-02-h200-moe-tiles.md).
TILE_CONFIGS: tuple[tuple[float, GroupedMatmulConfig, GroupedMatmulConfig], ...] = (
    (0.5, GroupedMatmulConfig(32, 128, 2, 4), GroupedMatmulConfig(32, 128, 2, 3)),
    (2, GroupedMatmulConfig(32, 128, 2, 3), GroupedMatmulConfig(64, 128, 2, 3)),
    (16, GroupedMatmulConfig(64, 128, 2, 2), GroupedMatmulConfig(64, 128, 2, 4)),
    (64, GroupedMatmulConfig(128, 64, 4, 4), GroupedMatmulConfig(128, 64, 4, 4)),
    (math.inf, GroupedMatmulConfig(128, 64, 8, 5), GroupedMatmulConfig(128, 64, 4, 3)),
)


# fp8 experts' launch shapes, by the same bands: a tile of fp8 weight is half the bytes, and converting it
# adds to the loop's instructions. Swept on an H200 with the conversion by moving bits (`moe_tile_sweep --fp8
# --move-bits`, experiments/results/2026-12-05-h200-ab-candidates.md); gate/up's from 16 to 512 tokens swept
# again on an H100 for its loop on fp16 rows (`nvllm.ops.moe_triton.GATE_UP_IN_FP16`; experiments/results/
# 2026-12-06-h100-fp16-down-and-decode-shapes.md), its first band on an H100 too, where the table's was as
# fast (experiments/results/2026-12-06-h100-attention-projections-gemm.md); its last not yet.
FP8_TILE_CONFIGS: tuple[tuple[float, GroupedMatmulConfig, GroupedMatmulConfig], ...] = (
    (0.5, GroupedMatmulConfig(32, 128, 2, 3), GroupedMatmulConfig(64, 128, 4, 3)),
    (2, GroupedMatmulConfig(64, 256, 4, 3), GroupedMatmulConfig(64, 128, 4, 4)),
    (16, GroupedMatmulConfig(64, 256, 4, 3), GroupedMatmulConfig(64, 128, 4, 4)),
    (64, GroupedMatmulConfig(64, 128, 4, 4), GroupedMatmulConfig(128, 128, 4, 3)),
    (math.inf, GroupedMatmulConfig(128, 64, 4, 3), GroupedMatmulConfig(128, 64, 4, 4)),
)


def config_band(num_pairs: int, num_experts: int) -> int:
    """The index in `TILE_CONFIGS` of the band of `num_pairs` pairs over `num_experts` experts."""
    per_expert = num_pairs / num_experts
    return next(band for band, (most, _, _) in enumerate(TILE_CONFIGS) if per_expert <= most)


def matmul_config(num_pairs: int, num_experts: int, gated: bool, fp8: bool = False) -> GroupedMatmulConfig:
    """The launch shape of the gate/up (`gated`) or the down matmul for `num_pairs` pairs over
    `num_experts` experts (`fp8`: experts stored in fp8)."""
    _, gate_up, down = (FP8_TILE_CONFIGS if fp8 else TILE_CONFIGS)[config_band(num_pairs, num_experts)]
    return gate_up if gated else down


# fp8 experts multiplying quantized activations (`model.fp8_activations`): each expert's intermediate
# activations are quantized in groups of this many columns, a scale each, by the epilogue of the gate/up
# kernel whose tile holds them (`nvllm.ops.moe_fp8_triton`).
FP8_INTERMEDIATE_GROUP = 64

# Or, where this is on, a scale per pair over the whole intermediate row (`nvllm.ops.moe_fp8_triton`): the
# down kernel then accumulates in its MMAs as gate/up does, rather than scaling each group's sums, and the
# groups' launch rules do not apply. Under tensor parallelism a rank holds a slice of each row and scales
# that, so TP=N no longer quantizes as TP=1 does. On: the prefill layer and the 30B bench were faster than
# in groups of 64 (experiments/results/2026-12-06-h100-intermediate-per-row.md).
FP8_INTERMEDIATE_PER_ROW = True

# Where this is on, the matmuls on fp8 activations (`nvllm.ops.moe_fp8_triton`) add each reduction slice's
# products (`block_k` of them) to an fp32 sum, waiting on the slice's MMAs to do so: Hopper's fp8 MMA
# accumulates in fewer bits than fp32 (about 14 of mantissa, DeepSeek-V3's report). Off, the tensor cores
# accumulate over the whole loop, as Triton's default on sm_90 and vLLM's fused MoE do, and a program waits
# on its MMAs once, after the loop. Off: the kernels then part further from the reference's fp32 sums, but
# no further from the fp8 experts on unquantized activations computed in fp32 (the quantization's own error
# dwarfs the accumulation's), and the prefill layer and the 30B bench were faster
# (experiments/results/2026-12-06-h100-fp8-sums-and-small-kernels.md).
FP8_ACTIVATION_SUMS_IN_FP32 = False

# Where this is on, the experts' down matmul writes each pair's weighted output in the activations' dtype
# (bf16) rather than fp32, and the sum of a token's pairs still adds them in fp32 and rounds once: half the
# bytes written and read between the two kernels, each pair's output rounded once more, as vLLM's fused MoE
# rounds it. The reference rounds so too (on bf16 activations it always did: its pairs are bf16 products).
# On: the sum, bound by those bytes, and the 30B bench were faster
# (experiments/results/2026-12-06-h100-fp8-sums-and-small-kernels.md).
PAIR_OUTPUTS_IN_INPUT_DTYPE = True


def pair_output_dtype(activations: torch.dtype) -> torch.dtype:
    """The dtype the down matmul writes the pairs' outputs in, for activations of dtype `activations`
    (`PAIR_OUTPUTS_IN_INPUT_DTYPE`)."""
    return activations if PAIR_OUTPUTS_IN_INPUT_DTYPE else torch.float32


# (most pairs per expert, gate/up's config, down's config) by the same bands, for the intermediate a scale a
# row (`FP8_INTERMEDIATE_PER_ROW`). The engine quantizes batches of 1,024 tokens and more
# (`nvllm.ops.moe_ops.FP8_ACTIVATIONS_MIN_TOKENS`): the last two bands. The last (prefill) band's shapes are
# the sweep's at 2,048-16,384 tokens at its 128-pair tiles, the second and third bands' the sweep's at 16-256
# tokens, all on an H100 (experiments/results/2026-12-06-h100-fp8-decode-and-prefill-tiles.md); the others
# the groups'.
FP8_ACTIVATION_TILE_CONFIGS: tuple[tuple[float, GroupedMatmulConfig, GroupedMatmulConfig], ...] = (
    (0.5, GroupedMatmulConfig(64, 128, 4, 4), GroupedMatmulConfig(64, 64, 4, 4)),
    (2, GroupedMatmulConfig(64, 256, 4, 3), GroupedMatmulConfig(64, 128, 4, 3)),
    (16, GroupedMatmulConfig(64, 256, 4, 2), GroupedMatmulConfig(64, 128, 4, 3)),
    (64, GroupedMatmulConfig(64, 128, 4, 3), GroupedMatmulConfig(128, 64, 4, 4)),
    (math.inf, GroupedMatmulConfig(128, 128, 8, 4), GroupedMatmulConfig(256, 128, 8, 4)),
)

# The same for the intermediate in groups (`FP8_INTERMEDIATE_PER_ROW` off): the gate/up kernel's block_n is a
# multiple of `FP8_INTERMEDIATE_GROUP` (its epilogue quantizes each group of the intermediate it holds), the
# down kernel's block_k the group (it scales one group a step). The last band is the sweep's on an H100
# (experiments/results/2026-12-05-h100-fp16-rows-and-prefill-tiles.md); the others are not yet swept: the
# widest reduction slice that keeps three or four tiles in flight, 8 warps where a program's two
# accumulators would not fit 4.
FP8_ACTIVATION_GROUP_TILE_CONFIGS: tuple[tuple[float, GroupedMatmulConfig, GroupedMatmulConfig], ...] = (
    (0.5, GroupedMatmulConfig(64, 128, 4, 4), GroupedMatmulConfig(64, 64, 4, 4)),
    (2, GroupedMatmulConfig(64, 128, 4, 4), GroupedMatmulConfig(64, 64, 4, 4)),
    (16, GroupedMatmulConfig(64, 128, 4, 4), GroupedMatmulConfig(128, 64, 4, 4)),
    (64, GroupedMatmulConfig(64, 128, 4, 3), GroupedMatmulConfig(128, 64, 4, 4)),
    (math.inf, GroupedMatmulConfig(64, 128, 4, 3), GroupedMatmulConfig(256, 64, 8, 4)),
)


def scales_per_row(per_row: bool | None) -> bool:
    """Whether fp8 activations' intermediate is quantized a scale a row: `per_row`, or where None as it is
    now (`FP8_INTERMEDIATE_PER_ROW`)."""
    return FP8_INTERMEDIATE_PER_ROW if per_row is None else per_row


def fp8_activation_table(
    per_row: bool | None = None,
) -> tuple[str, tuple[tuple[float, GroupedMatmulConfig, GroupedMatmulConfig], ...]]:
    """The name and the table of the matmuls on fp8 activations for the intermediate a scale a row
    (`per_row`) or in groups; None: as it is quantized now (`FP8_INTERMEDIATE_PER_ROW`)."""
    if scales_per_row(per_row):
        return "FP8_ACTIVATION_TILE_CONFIGS", FP8_ACTIVATION_TILE_CONFIGS
    return "FP8_ACTIVATION_GROUP_TILE_CONFIGS", FP8_ACTIVATION_GROUP_TILE_CONFIGS


def fp8_activation_config(num_pairs: int, num_experts: int, gated: bool) -> GroupedMatmulConfig:
    """The launch shape of the gate/up (`gated`) or the down matmul for `num_pairs` pairs over
    `num_experts` experts."""
    _, gate_up, down = fp8_activation_table()[1][config_band(num_pairs, num_experts)]
    return gate_up if gated else down
