"""The grouped matmuls' launch shapes: each matmul in Triton's interpreter, at configurations across the
sweep's grid and each row tile, against the torch reference on a small random layer; and `matmul_config`
choosing from `TILE_CONFIGS` by the band of the mean pairs per expert."""

from __future__ import annotations

import pytest

from tests.helpers.triton_interpreter import run_in_interpreter


def test_the_grouped_matmuls_at_each_launch_shape_equal_the_torch_reference():
    run_in_interpreter(
        """
import torch
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_tiles import GroupedMatmulConfig
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_triton import grouped_matmul
generator = torch.Generator().manual_seed(0)
# hidden and intermediate sizes off every block size (multiples of 16, as tensor-core tiles need), so that
# both matmuls' column and reduction masks are exercised
tokens, experts, top_k, hidden, intermediate = 40, 4, 2, 272, 144
x = torch.randn(tokens, hidden, generator=generator)
gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=generator) / hidden**0.5
down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
weights, ids = torch.randn(tokens, experts, generator=generator).softmax(-1).topk(top_k, -1)
expected = experts_reference(x, gate_up, down, weights, ids)
# (row tile, block_n, block_k, num_warps, num_stages)
shapes = [(16, 16, 64, 2, 2), (64, 128, 256, 8, 5), (32, 32, 128, 4, 3), (16, 128, 64, 4, 4)]
shapes.append((64, 16, 256, 4, 3))
for block_m, *launch in shapes:
    config = GroupedMatmulConfig(*launch)
    sorted_pairs, tile_expert = align_by_expert(ids, experts, block_m)
    tiles = (sorted_pairs, tile_expert, weights.flatten().contiguous(), block_m)
    activated = x.new_empty(tokens * top_k, intermediate)
    grouped_matmul(x, gate_up, activated, *tiles, divisor=top_k, gated=True, weighted=False, config=config)
    out = x.new_empty(tokens * top_k, hidden)
    grouped_matmul(activated, down, out, *tiles, divisor=1, gated=False, weighted=True, config=config)
    ours = out.view(tokens, top_k, hidden).sum(1)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5, msg=lambda m: f"{block_m} {config}: {m}")
"""
    )


def test_matmul_config_picks_the_band_of_the_mean_pairs_per_expert(monkeypatch):
    from nvllm.ops import moe_tiles
    from nvllm.ops.moe_tiles import GroupedMatmulConfig, matmul_config

    # a table whose entries all differ: band b's gate/up config has b + 2 stages, its down config b + 7
    table = tuple(
        (most, GroupedMatmulConfig(16, 64, 4, band + 2), GroupedMatmulConfig(32, 128, 8, band + 7))
        for band, most in enumerate((0.5, 2, 16, 64, float("inf")))
    )
    monkeypatch.setattr(moe_tiles, "TILE_CONFIGS", table)
    # 128 experts: (pairs, band); each band's upper end is its own (a token's 8 pairs are 1/16 a expert)
    expected = [(8, 0), (64, 0), (65, 1), (256, 1), (257, 2), (2048, 2), (2049, 3), (8192, 3), (8193, 4)]
    for pairs, band in expected:
        assert matmul_config(pairs, 128, gated=True) == GroupedMatmulConfig(16, 64, 4, band + 2), pairs
        assert matmul_config(pairs, 128, gated=False) == GroupedMatmulConfig(32, 128, 8, band + 7), pairs
    assert matmul_config(3, 4, gated=True).num_stages == 3  # 0.75 an expert: the second band


def test_pairs_written_in_the_input_dtype_are_each_rounded_once_and_summed_in_fp32():
    """`moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE`: down writes each pair's output in the activations' dtype
    (fp16 here: the interpreter rounds its casts to fp16 as torch does), `sum_pairs` adds them in fp32 and
    rounds once: the fp32 pairs' outputs, each rounded, then summed; on unquantized activations and on fp8
    ones, and the torch reference of fp8 activations rounds its pairs so too."""
    run_in_interpreter(
        """
import torch
from nvllm.ops import moe_tiles
from nvllm.ops.moe_routing import padding_to_no_expert, route
from nvllm.ops.moe_tiles import row_tile
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_fp8_triton import fp8_activation_pair_outputs
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_triton import grouped_experts, unquantized_activation_pair_outputs
generator = torch.Generator().manual_seed(0)
tokens, experts, top_k, hidden, intermediate = 24, 8, 3, 64, 48
x = torch.randn(tokens, hidden, generator=generator).half()
gate_up = (torch.randn(experts, 2 * intermediate, hidden, generator=generator) / hidden**0.5).half()
down = (torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5).half()
weights, ids = route(torch.randn(tokens, experts, generator=generator), top_k, renormalize=True)
weights, ids = padding_to_no_expert(weights.half(), ids, torch.arange(tokens) >= tokens - 2, experts)
block_m = row_tile(tokens * top_k, experts)
sorted_pairs, tile_expert = align_by_expert(ids, experts, block_m)
moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE = False
pairs = unquantized_activation_pair_outputs(x, gate_up, down, weights, sorted_pairs, tile_expert, block_m)
assert pairs.dtype == torch.float32
routed = (ids < experts).flatten()[:, None]


# each routed pair's fp32 output rounded to fp16, a token's summed in fp32 in order, rounded once
def rounded_sum(pairs):
    rounded = torch.where(routed, pairs, 0).half().float().view(tokens, top_k, hidden)
    total = rounded[:, 0].clone()
    for choice in range(1, top_k):
        total += rounded[:, choice]
    return total.half()


in_fp32 = grouped_experts(x, gate_up, down, weights, ids)
# fp8 experts on fp8 activations
(gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up.float()), quantize_rows(down.float())
fp8 = (gate_up_q, down_q, weights, ids, gate_up_scale, down_scale)
fp8_block_m = row_tile(tokens * top_k, experts, quantized_activations=True)
fp8_tiles = align_by_expert(ids, experts, fp8_block_m)
fp8_pairs = fp8_activation_pair_outputs(x, gate_up_q, down_q, weights, *fp8_tiles, fp8_block_m, *fp8[4:])
fp8_in_fp32 = grouped_experts(x, *fp8, True)
reference_in_fp32 = experts_reference(x, *fp8, quantize_activations=True)
moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE = True
ours = grouped_experts(x, gate_up, down, weights, ids)
assert ours.dtype == torch.float16 and torch.equal(ours, rounded_sum(pairs))
assert not torch.equal(ours, in_fp32)  # the pairs' rounding shows
assert ours[-2:].eq(0).all()
ours = grouped_experts(x, *fp8, True)
assert torch.equal(ours, rounded_sum(fp8_pairs)) and not torch.equal(ours, fp8_in_fp32)
reference = experts_reference(x, *fp8, quantize_activations=True)
assert not torch.equal(reference, reference_in_fp32)
torch.testing.assert_close(ours, reference, atol=1e-5 * reference.abs().max().item(), rtol=1e-3)
"""
    )


def test_sum_pairs_adds_each_tokens_choices_in_order_but_none_of_no_expert():
    run_in_interpreter(
        """
import torch
from nvllm.ops.moe_triton import sum_pairs
generator = torch.Generator().manual_seed(0)
# a width past one program's columns (two programs a token, the second masked), 3 tokens of 8 choices
tokens, top_k, width = 3, 8, 1500
pairs = torch.randn(tokens * top_k, width, generator=generator) * torch.logspace(-3, 3, width)
by_token = pairs.view(tokens, top_k, width)
in_order = by_token[:, 0].clone()
for choice in range(1, top_k):
    in_order += by_token[:, choice]
experts = 16
ids = torch.randint(0, experts, (tokens, top_k), generator=generator)
assert torch.equal(sum_pairs(pairs, ids, experts, torch.float32), in_order)
# rounded once to bf16 (the interpreter's cast truncates where the GPU's rounds: one bf16 step at most)
rounded = sum_pairs(pairs, ids, experts, torch.bfloat16).float()
torch.testing.assert_close(rounded, in_order, atol=0, rtol=2**-7)
assert sum_pairs(pairs[:0], ids[:0], experts, torch.bfloat16).shape == (0, width)
# pairs of no expert (a padding token's, and one choice of a real token) add nothing, NaN rows included
ids[2] = experts
ids[0, 3] = experts
pairs.view(tokens, top_k, width)[2] = float("nan")
pairs.view(tokens, top_k, width)[0, 3] = float("nan")
routed = (ids < experts).float()[:, :, None]
expected = by_token[:, 0].nan_to_num() * routed[:, 0]
for choice in range(1, top_k):
    expected += by_token[:, choice].nan_to_num() * routed[:, choice]
assert torch.equal(sum_pairs(pairs, ids, experts, torch.float32), expected)
assert expected[2].eq(0).all()
"""
    )


@pytest.mark.parametrize("per_row", [False, True])
def test_every_tables_launch_shape_is_one_its_sweep_times(per_row, monkeypatch):
    """Each band's configurations in each table (bf16 experts, fp8 ones, fp8 ones on fp8 activations) are
    in the grid `moe_tile_sweep` times for that table, at the band's row tile, within an H200's shared
    memory: the sweep can always set the table's time beside the fastest. With the intermediate a scale a
    row (`--intermediate-per-row`) down's grid also holds reduction slices other than the group."""
    pytest.importorskip("triton")
    from experiments.kernels.moe_tile_sweep import KINDS, engine_table, grid, in_grid
    from nvllm.ops import moe_tiles
    from nvllm.ops.moe_tiles import row_tile

    monkeypatch.setattr(moe_tiles, "FP8_INTERMEDIATE_PER_ROW", per_row)
    h200_shared_memory = 232448
    for kind in KINDS:
        for most, gate_up, down in engine_table(kind)[1]:
            pairs = int(128 * min(most, 128))  # the band's last pair count over 128 experts (or one past)
            block_m = row_tile(pairs, 128, kind == "fp8 activations")
            for gated, config in ((True, gate_up), (False, down)):
                assert config in grid(kind, gated), (kind, most, config)
                assert in_grid(config, block_m, gated, h200_shared_memory, kind), (kind, most, config)
    slices = {config.block_k for config in grid("fp8 activations", gated=False)}
    assert slices == ({64, 128, 256} if per_row else {moe_tiles.FP8_INTERMEDIATE_GROUP}), slices


def test_the_sweeps_fp8_activation_grid_follows_the_quantization_group(monkeypatch):
    """`--intermediate-group`: gate/up's block_n one, two or four groups, down's block_k the group."""
    pytest.importorskip("triton")
    from experiments.kernels.moe_tile_sweep import grid
    from nvllm.ops import moe_tiles

    monkeypatch.setattr(moe_tiles, "FP8_INTERMEDIATE_PER_ROW", False)
    for group in (64, 128):
        monkeypatch.setattr(moe_tiles, "FP8_INTERMEDIATE_GROUP", group)
        widths = {config.block_n for config in grid("fp8 activations", gated=True)}
        slices = {config.block_k for config in grid("fp8 activations", gated=False)}
        assert widths == {group, 2 * group, 4 * group} and slices == {group}, (group, widths, slices)
