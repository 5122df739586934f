"""fp8 experts on fp8 activations (`model.fp8_activations`, `nvllm.ops.moe_fp8_triton`): the rounding to
e4m3 the kernels do in fp32 against torch's conversion, every e4m3 value and every tie; the activations'
quantization kernel against `nvllm.ops.fp8.quantize_tokens`; the two grouped matmuls in Triton's interpreter
at each launch shape against the torch reference; their main loops compiled for sm_90 on the fp8 tensor
cores, nothing converted; the group quantization of the reference."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch

from nvllm.ops.fp8 import FP8, FP8_MAX, dequantize_groups, quantize_groups
from tests.helpers.triton_interpreter import run_in_interpreter


def test_rounding_to_e4m3_in_fp32_gives_torchs_conversion_at_every_value_and_tie():
    run_in_interpreter(
        """
import torch, triton, triton.language as tl
from nvllm.ops.moe_fp8_triton import round_to_e4m3

@triton.jit
def kernel(x_ptr, q_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(q_ptr + i, round_to_e4m3(tl.load(x_ptr + i)).to(tl.float8e4nv))

values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
values = values[values.isfinite()].unique()
ties = (values[1:] + values[:-1]) / 2
up, down = torch.tensor(float("inf")), torch.tensor(float("-inf"))
x = torch.cat([values, ties, ties.nextafter(up), ties.nextafter(down), torch.randn(2048) * 60])
x = x[x.abs() <= 448]
padded = torch.zeros(triton.next_power_of_2(x.numel()))
padded[: x.numel()] = x
ours = torch.empty(padded.numel(), dtype=torch.float8_e4m3fn)
kernel[(1,)](padded, ours, padded.numel())
expected = padded.to(torch.float8_e4m3fn)
wrong = ours.view(torch.uint8) != expected.view(torch.uint8)
assert not wrong.any(), (padded[wrong][:8], ours.float()[wrong][:8], expected.float()[wrong][:8])
"""
    )


def test_rounding_to_bf16_in_integers_gives_torchs_conversion():
    """Every tie between neighbouring bf16 values (and the floats beside them), random values of every
    magnitude, signed zeros, fp32 subnormals, the largest finite floats (which round to infinity), the
    infinities, and NaNs of either sign, whose bits the addition would carry into the sign or to zero. The
    kernel stores the rounded fp32 value: the interpreter's own cast to bf16 mishandles subnormals."""
    run_in_interpreter(
        """
import torch, triton, triton.language as tl
from nvllm.ops.moe_fp8_triton import round_to_bf16

@triton.jit
def kernel(x_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, round_to_bf16(tl.load(x_ptr + i)))

generator = torch.Generator().manual_seed(0)
values = torch.randn(512, generator=generator) * torch.logspace(-30, 30, 512)
values = values.to(torch.bfloat16).float().unique()
ties = (values[1:].double() + values[:-1].double()).div(2).float()
up, down = torch.tensor(float("inf")), torch.tensor(float("-inf"))
largest = torch.finfo(torch.float32).max
special = [0.0, -0.0, 1e-40, -1e-40, largest, -largest, float("inf"), float("-inf")]
nans = torch.tensor([0x7FFFFFFF, -1, 0x7FC00000], dtype=torch.int32).view(torch.float32)
x = torch.cat([values, ties, ties.nextafter(up), ties.nextafter(down), torch.tensor(special), nans])
padded = torch.zeros(triton.next_power_of_2(x.numel()))
padded[: x.numel()] = x
ours = torch.empty(padded.numel())
kernel[(1,)](padded, ours, padded.numel())
expected = padded.to(torch.bfloat16).float()
wrong = (ours.view(torch.int32) != expected.view(torch.int32)) & ~(ours.isnan() & expected.isnan())
assert not wrong.any(), (padded[wrong][:8], ours[wrong][:8], expected[wrong][:8])
assert ours[x.numel() - 3 : x.numel()].isnan().all()
"""
    )


def test_the_quantization_kernel_gives_the_references_codes_and_scales():
    run_in_interpreter(
        """
import torch
from nvllm.ops import fp8, moe_fp8_triton
generator = torch.Generator().manual_seed(0)
# rows of very different magnitudes, a row of zeros, a width that is not a power of two
x = torch.randn(5, 300, generator=generator) * torch.logspace(-3, 2, 5)[:, None]
x[2] = 0
for dtype in (torch.float32, torch.bfloat16):
    q, scale = moe_fp8_triton.quantize_tokens(x.to(dtype))
    q_ref, scale_ref = fp8.quantize_tokens(x.to(dtype))
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(scale, scale_ref)
"""
    )


def test_the_grouped_fp8_matmuls_at_each_launch_shape_equal_the_torch_reference():
    """The intermediate quantized in groups (`FP8_INTERMEDIATE_PER_ROW` off). Hidden and intermediate sizes
    off every block (both matmuls' column and reduction masks, a last group narrower than the others);
    input columns and expert rows of magnitudes far apart, so that a scale applied to the wrong token,
    group, row or expert shows; every launch shape of the groups' table, and gate/up
    tiles of several quantization groups, at each row tile; and the whole layer through
    `nvllm::fused_experts`' and `nvllm::routed_experts`' CUDA paths."""
    run_in_interpreter(
        """
import torch
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops import moe_fp8_triton
from nvllm.ops.moe_fp8_triton import grouped_fp8_matmul
from nvllm.ops.moe_tiles import FP8_ACTIVATION_GROUP_TILE_CONFIGS
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_tiles import FP8_INTERMEDIATE_GROUP, GroupedMatmulConfig
from nvllm.ops.moe_route_triton import routed_experts
from nvllm.ops.moe_routing import route
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_triton import grouped_experts, sum_pairs
from nvllm.ops import moe_tiles
moe_tiles.FP8_INTERMEDIATE_PER_ROW = False  # the intermediate in groups, each group's scale
generator = torch.Generator().manual_seed(0)
tokens, experts, top_k, hidden, intermediate = 40, 4, 2, 272, 144
x = torch.randn(tokens, hidden, generator=generator) * torch.logspace(-1, 1, hidden)
x[3] *= 100
rows = torch.logspace(-2, 1, 2 * intermediate)[torch.randperm(2 * intermediate, generator=generator)]
gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=generator) * rows[:, None] / hidden**0.5
gate_up[1] *= 10
down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
logits = torch.randn(tokens, experts, generator=generator)
weights, ids = route(logits, top_k, renormalize=True)
(gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
fp8_experts = (gate_up_q, down_q)
scales = (gate_up_scale, down_scale)
expected = experts_reference(x, *fp8_experts, weights, ids, *scales, quantize_activations=True)
unquantized = experts_reference(x, *fp8_experts, weights, ids, *scales)
assert (unquantized - expected).abs().max() > 1e-2 * expected.abs().max()  # the activations' rounding shows


def close(ours, label):
    atol = 1e-5 * expected.abs().max()
    torch.testing.assert_close(ours, expected, atol=atol, rtol=1e-5, msg=lambda m: f"{label}: {m}")


x_q, x_scale = moe_fp8_triton.quantize_tokens(x)
gate_up_operands = (x_q, x_scale, gate_up_q, gate_up_scale)
launches = {(gate_up, down) for _, gate_up, down in FP8_ACTIVATION_GROUP_TILE_CONFIGS}
# gate/up tiles of two and four groups: the intermediate's 144 columns end inside a 128-column tile's second
# group, and a 256-column tile's last two groups are past the end
wide = [GroupedMatmulConfig(groups * FP8_INTERMEDIATE_GROUP, 128, 8, 3) for groups in (2, 4)]
launches |= {(gate_up, down) for gate_up in wide for _, down in launches}
for block_m in (16, 32, 64, 128):
    sorted_pairs, tile_expert = align_by_expert(ids, experts, block_m)
    tiles = (sorted_pairs, tile_expert, weights.flatten().contiguous(), block_m)
    slots = sorted_pairs.numel()
    for gate_up_config, down_config in sorted(launches, key=str):
        activated = torch.empty(slots, intermediate, dtype=torch.float8_e4m3fn)
        activated_scale = torch.empty(-(-intermediate // FP8_INTERMEDIATE_GROUP), slots)
        grouped_fp8_matmul(*gate_up_operands, activated, activated_scale, *tiles, top_k, gate_up_config)
        out = torch.empty(tokens * top_k, hidden)
        down_operands = (activated, activated_scale, down_q, down_scale)
        grouped_fp8_matmul(*down_operands, out, None, *tiles, top_k, down_config)
        close(sum_pairs(out, ids, experts, torch.float32), f"{block_m} {gate_up_config} {down_config}")
close(grouped_experts(x, *fp8_experts, weights, ids, *scales, True), "fused_experts")
close(routed_experts(x, *fp8_experts, logits, None, top_k, True, *scales, True), "routed_experts")
# the ops sort the pairs into fp8 activations' own row tiles (20 pairs an expert here: the middle band)
from nvllm.ops import moe_route_triton, moe_tiles, moe_triton
moe_tiles.FP8_ACTIVATION_GROUP_ROW_TILES = (16, 128, 64)
tiles_used = []
def recording(aligned):
    def experts_in_tiles(*args):
        tiles_used.append(args[7])  # block_m
        return aligned(*args)
    return experts_in_tiles
moe_triton.aligned_experts = recording(moe_triton.aligned_experts)
moe_route_triton.aligned_experts = recording(moe_route_triton.aligned_experts)
close(grouped_experts(x, *fp8_experts, weights, ids, *scales, True), "fused_experts, 128-pair tiles")
close(routed_experts(x, *fp8_experts, logits, None, top_k, True, *scales, True), "routed_experts, 128")
assert tiles_used == [128, 128], tiles_used
"""
    )


def test_the_intermediate_quantized_a_scale_per_row_equals_the_torch_reference():
    """`FP8_INTERMEDIATE_PER_ROW`: gate/up writes silu(gate) * up in bf16, rounded to nearest (Triton's
    interpreter would truncate it), each row is quantized on one scale, and down applies it after its
    loop; at the launch shapes of its table and another (down's block_k no longer the group), each row
    tile, and through the op. The reference differs from the groups' (intermediate columns of magnitudes
    far apart, so that a row's scale shows)."""
    run_in_interpreter(
        """
import torch
from nvllm.ops import moe_fp8_triton, moe_tiles
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_fp8_triton import grouped_fp8_matmul
from nvllm.ops.moe_ops import experts_reference
from nvllm.ops.moe_routing import route
from nvllm.ops.moe_tiles import GroupedMatmulConfig
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_triton import grouped_experts, sum_pairs
generator = torch.Generator().manual_seed(1)
tokens, experts, top_k, hidden, intermediate = 40, 4, 2, 272, 144
x = torch.randn(tokens, hidden, generator=generator)
x[3] *= 100
# gate rows (and so intermediate columns) of magnitudes 1,000 apart
rows = torch.logspace(-2, 1, intermediate)[torch.randperm(intermediate, generator=generator)].repeat(2)
gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=generator) * rows[:, None] / hidden**0.5
gate_up[1] *= 10
down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
weights, ids = route(torch.randn(tokens, experts, generator=generator), top_k, renormalize=True)
(gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
layer = (x, gate_up_q, down_q, weights, ids, gate_up_scale, down_scale)
moe_tiles.FP8_INTERMEDIATE_PER_ROW = False
by_groups = experts_reference(*layer, quantize_activations=True)
moe_tiles.FP8_INTERMEDIATE_PER_ROW = True
expected = experts_reference(*layer, quantize_activations=True)
assert (expected - by_groups).abs().max() > 1e-3 * expected.abs().max()  # the rows' scales show


def close(ours, label):
    atol = 1e-5 * expected.abs().max()
    torch.testing.assert_close(ours, expected, atol=atol, rtol=1e-5, msg=lambda m: f"{label}: {m}")


x_q, x_scale = moe_fp8_triton.quantize_tokens(x)
launches = {(gate_up, down) for _, gate_up, down in moe_tiles.FP8_ACTIVATION_TILE_CONFIGS}
launches.add((GroupedMatmulConfig(32, 256, 4, 3), GroupedMatmulConfig(128, 256, 4, 3)))
for block_m in (16, 64, 128):
    sorted_pairs, tile_expert = align_by_expert(ids, experts, block_m)
    tiles = (sorted_pairs, tile_expert, weights.flatten().contiguous(), block_m)
    for gate_up_config, down_config in sorted(launches, key=str):
        activated = torch.empty(sorted_pairs.numel(), intermediate, dtype=torch.bfloat16)
        gate_up_operands = (x_q, x_scale, gate_up_q, gate_up_scale, activated, None)
        grouped_fp8_matmul(*gate_up_operands, *tiles, top_k, gate_up_config)
        activated_q, activated_scale = moe_fp8_triton.quantize_tokens(activated)
        out = torch.empty(tokens * top_k, hidden)
        down_operands = (activated_q, activated_scale, down_q, down_scale)
        grouped_fp8_matmul(*down_operands, out, None, *tiles, top_k, down_config)
        close(sum_pairs(out, ids, experts, torch.float32), f"{block_m} {gate_up_config} {down_config}")
close(grouped_experts(x, *layer[1:], True), "fused_experts")
"""
    )


def test_the_fp8_activation_loops_multiply_on_the_fp8_tensor_cores_converting_nothing():
    """Compiled for sm_90 on the CPU at a single stream's, a decode batch's and a prefill's launch shapes:
    each main loop's MMAs are fp8 ones (QGMMA), and nothing in it converts or rebuilds an operand."""
    pytest.importorskip("triton")
    from experiments.kernels.fp8_weights_sass import FP8_ACTIVATION_KERNELS, converting_instructions
    from experiments.kernels.hopper_sass import disassemble, main_loop_instructions, nvidia_tool

    if not Path(nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    with tempfile.TemporaryDirectory() as directory:
        for name, build in FP8_ACTIVATION_KERNELS.items():
            kernel, _, _ = build()
            sass = disassemble(kernel.asm["cubin"], Path(directory))[0]
            loop = main_loop_instructions(sass)
            assert loop["QGMMA.64"], (name, loop)
            assert not [op for op in loop if "HMMA" in op], name
            # the loop's one shift steps its pipeline's buffer index; nothing else converts or moves
            assert list(converting_instructions(sass)) == ["SHF.R.S32.HI"], (name, loop)


@pytest.mark.parametrize("gated", [True, False])
def test_sums_promoted_to_fp32_wait_on_the_mmas_each_slice_and_unpromoted_only_after_the_loop(
    gated, monkeypatch
):
    """`moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32` reaches the compiled loop (sm_90, on the CPU, a prefill's
    launch shape, the intermediate a scale a row): promoted, each slice's MMAs are waited for until none is
    in flight before their sums are added in fp32; not, the loop waits on none of them to finish, keeping
    its MMAs in flight."""
    pytest.importorskip("triton")
    from experiments.kernels.fp8_weights_sass import grouped_fp8_activations
    from experiments.kernels.hopper_sass import disassemble, main_loop_lines, nvidia_tool
    from nvllm.ops import moe_tiles

    if not Path(nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    waits = {}
    with tempfile.TemporaryDirectory() as directory:
        for promoted in (True, False):
            monkeypatch.setattr(moe_tiles, "FP8_ACTIVATION_SUMS_IN_FP32", promoted)
            kernel, _, _ = grouped_fp8_activations(gated=gated, pairs=16384, row_scales=True)
            loop = main_loop_lines(disassemble(kernel.asm["cubin"], Path(directory))[0])
            assert any("QGMMA.64" in line for line in loop), loop
            waits[promoted] = [line for line in loop if re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b", line)]
    assert waits[True] and not waits[False], waits


def test_groups_are_quantized_each_on_its_own_scale():
    x = torch.randn(3, 150) * torch.logspace(-2, 2, 150)
    x[1, 64:128] = 0
    q, scale = quantize_groups(x, 64)
    assert q.dtype == FP8 and q.shape == x.shape and scale.shape == (3, 3)
    for g, columns in enumerate((slice(0, 64), slice(64, 128), slice(128, 150))):
        amax = x[:, columns].abs().amax(1)
        torch.testing.assert_close(scale[:, g], torch.where(amax > 0, amax / FP8_MAX, 1.0))
    assert scale[1, 1] == 1 and (q[1, 64:128].float() == 0).all()
    # within half an e4m3 step (2^-4 of a value) of each element, or of its group's smallest normal
    back = dequantize_groups(q, scale, 64)
    smallest = scale.repeat_interleave(64, 1)[:, :150] * 2**-6
    assert ((back - x).abs() <= torch.maximum(x.abs() * 2**-4, smallest)).all()


@pytest.mark.parametrize("op", ["fused_experts", "routed_experts"])
def test_the_experts_quantize_activations_from_the_batch_size_the_rule_names(monkeypatch, op):
    """`model.fp8_activations` quantizes the experts' activations in batches of at least
    `FP8_ACTIVATIONS_MIN_TOKENS` tokens (prefill); smaller ones (decode) multiply them unquantized. Both ops
    follow the rule off CUDA too, so that the reference computes what the kernels do."""
    from nvllm.ops import moe_ops
    from nvllm.ops.fp8 import quantize_rows
    from nvllm.ops.moe_routing import route

    generator = torch.Generator().manual_seed(0)
    tokens, experts, top_k, hidden, intermediate = 6, 4, 2, 32, 128
    x = torch.randn(tokens, hidden, generator=generator)
    gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=generator) / hidden**0.5
    down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
    logits = torch.randn(tokens, experts, generator=generator)
    weights, ids = route(logits, top_k, renormalize=True)
    (gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    fp8 = dict(gate_up_scale=gate_up_scale, down_scale=down_scale)

    def reference(rows: int, quantized: bool) -> torch.Tensor:
        args = (x[:rows], gate_up_q, down_q, weights[:rows], ids[:rows])
        return moe_ops.experts_reference(*args, **fp8, quantize_activations=quantized)

    def ours(rows: int) -> torch.Tensor:
        if op == "fused_experts":
            args = (x[:rows], gate_up_q, down_q, weights[:rows], ids[:rows])
            return moe_ops.fused_experts(*args, **fp8, quantize_activations=True)
        args = (x[:rows], gate_up_q, down_q, logits[:rows], None, top_k, True)
        return moe_ops.routed_experts(*args, **fp8, quantize_activations=True)

    monkeypatch.setattr(moe_ops, "FP8_ACTIVATIONS_MIN_TOKENS", 4)
    assert not torch.equal(reference(6, True), reference(6, False))  # the activations' rounding shows
    torch.testing.assert_close(ours(3), reference(3, False), atol=0, rtol=0)
    torch.testing.assert_close(ours(4), reference(4, True), atol=0, rtol=0)
    torch.testing.assert_close(ours(6), reference(6, True), atol=0, rtol=0)
