"""bf16 rows as fp16 times a power of two each (`nvllm.ops.fp16_rows`), and fp8 experts' matmuls reading them
(`nvllm.ops.moe_triton.GATE_UP_IN_FP16`, `DOWN_IN_FP16`): in Triton's interpreter, against the torch
reference and against the experts on bf16 rows."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.helpers.triton_interpreter import run_in_interpreter


def test_rows_become_fp16_exactly_with_a_power_of_two_each():
    """Rows far above fp16's range, far below it, of zeros, and one whose values span 2^60: the kernel gives
    the reference's codes and scales, every value within 2^-28 of its row's largest comes back exactly, and
    each row's largest lands in [2^14, 2^15)."""
    run_in_interpreter(
        """
import torch
from nvllm.ops.fp16_rows import fp16_rows, fp16_rows_reference
generator = torch.Generator().manual_seed(0)
x = torch.randn(6, 300, generator=generator) * torch.logspace(-3, 3, 300)
x[1] *= 1e6
x[2] *= 1e-20
x[3] = 0
x[4] = torch.logspace(-30, 30, 300, base=2) * torch.randn(300, generator=generator).sign()
x = x.to(torch.bfloat16)
x16, scale = fp16_rows(x)
expected_x16, expected_scale = fp16_rows_reference(x)
assert torch.equal(x16, expected_x16) and torch.equal(scale, expected_scale)
assert torch.equal(scale.log2(), scale.log2().round()), scale  # powers of two
back, x32 = x16.float() * scale[:, None], x.float()
largest = x32.abs().amax(1, keepdim=True)
assert torch.equal(back[x32.abs() >= largest * 2**-28], x32[x32.abs() >= largest * 2**-28])
assert ((back - x32).abs() <= largest * 2**-39).all()
tops = x16.float().abs().amax(1)
assert ((tops >= 2**14) & (tops < 2**15) | (tops == 0)).all(), tops
assert scale[3] == 1 and (x16[3] == 0).all()
"""
    )


def test_fp8_experts_on_fp16_rows_equal_them_on_the_rows_themselves():
    """The gate/up grouped matmul of fp8 experts on `fp16_rows(x)` with their scales, against the same on
    `x` in fp32 (Triton's interpreter runs no bf16 dot: the GPU tests compare with bf16 rows), for tokens
    beyond fp16's range and far below its normal numbers, at a decode batch's tile and at prefill's; down
    the same on gate/up's output; and the experts' op reads bf16 rows so only where `GATE_UP_IN_FP16` and
    `DOWN_IN_FP16` say."""
    run_in_interpreter(
        """
import torch
from nvllm.ops import moe_triton
from nvllm.ops.fp16_rows import fp16_rows
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.moe_routing import route
from nvllm.ops.moe_tiles import GroupedMatmulConfig
from nvllm.ops.moe_align_triton import align_by_expert
from nvllm.ops.moe_triton import grouped_matmul
generator = torch.Generator().manual_seed(0)
experts, top_k, hidden, intermediate = 4, 2, 272, 144
gate_up = torch.randn(experts, 2 * intermediate, hidden, generator=generator) / hidden**0.5
down = torch.randn(experts, hidden, intermediate, generator=generator) / intermediate**0.5
(gate_up_q, gate_up_scale), (down_q, down_scale) = quantize_rows(gate_up), quantize_rows(down)
decode, prefill = (5, 16, GroupedMatmulConfig(64, 128, 4, 3)), (300, 64, GroupedMatmulConfig(128, 64, 4, 3))
for tokens, block_m, config in (decode, prefill):
    x = torch.randn(tokens, hidden, generator=generator) * torch.logspace(-1, 1, hidden)
    x[0] *= 1e5
    x[1] *= 1e-7
    x = x.to(torch.bfloat16)
    assert x[0].float().abs().max() > 65504 and x[1].float().abs().max() < 2**-14  # fp16's range, both ways
    weights, ids = route(torch.randn(tokens, experts, generator=generator), top_k, renormalize=True)
    sorted_pairs, tile_expert = align_by_expert(ids, experts, block_m)
    tiles = (sorted_pairs, tile_expert, weights.flatten().contiguous(), block_m)
    launch = dict(divisor=top_k, gated=True, weighted=False, config=config, w_scale=gate_up_scale)
    on_rows = torch.empty(tokens * top_k, intermediate)
    grouped_matmul(x.float(), gate_up_q, on_rows, *tiles, **launch)
    on_fp16 = torch.empty(tokens * top_k, intermediate)
    x16, scale = fp16_rows(x)
    grouped_matmul(x16, gate_up_q, on_fp16, *tiles, **launch, a_scale=scale)
    torch.testing.assert_close(on_fp16, on_rows, atol=0, rtol=1e-6, msg=lambda m: f"{tokens} tokens: {m}")
    # down on gate/up's output, as bf16 rows (the first pair's far beyond fp16's range) and as fp16 rows
    activated = on_rows.to(torch.bfloat16)
    activated[0] *= 1e5
    launch = dict(divisor=1, gated=False, weighted=True, config=config, w_scale=down_scale)
    down_on_rows, down_on_fp16 = torch.empty(tokens * top_k, hidden), torch.empty(tokens * top_k, hidden)
    grouped_matmul(activated.float(), down_q, down_on_rows, *tiles, **launch)
    activated16, activated_scale = fp16_rows(activated)
    grouped_matmul(activated16, down_q, down_on_fp16, *tiles, **launch, a_scale=activated_scale)
    torch.testing.assert_close(down_on_fp16, down_on_rows, atol=0, rtol=1e-6, msg=lambda m: f"down: {m}")

# the op: gate/up's input, fp16 with a scale where the switch is on, bf16 without; down's, bf16 either way
inputs = []
def recording(*args, **kwargs):
    inputs.append((args[0].dtype, kwargs.get("a_scale") is not None))
    return grouped_matmul(*args, **kwargs)
moe_triton.grouped_matmul = recording
layer = (x, gate_up_q, down_q, weights, ids, gate_up_scale, down_scale)
for gate_up_in_fp16, down_in_fp16 in ((False, False), (True, False), (False, True)):
    moe_triton.GATE_UP_IN_FP16, moe_triton.DOWN_IN_FP16 = gate_up_in_fp16, down_in_fp16
    moe_triton.grouped_experts(*layer)
moe_triton.DOWN_IN_FP16 = True
moe_triton.grouped_experts(x.float(), *layer[1:])  # fp32 rows: left as they are
bf16, fp16, fp32 = (torch.bfloat16, False), (torch.float16, True), (torch.float32, False)
assert inputs == [bf16, bf16, fp16, bf16, bf16, fp16, fp32, fp32], inputs
"""
    )


def test_gate_up_on_fp16_rows_converts_a_weight_pair_in_one_instruction():
    """Compiled for sm_90 on the CPU at a decode batch's and a prefill's launch shapes: gate/up's loop on fp16
    rows converts each e4m3 pair to f16 in one instruction (`F2FP`) and nothing else, and issues fewer
    instructions than the same loop moving bits to bf16."""
    pytest.importorskip("triton")
    from experiments.kernels.fp8_weights_sass import grouped
    from experiments.kernels.hopper_sass import disassemble, main_loop_instructions, nvidia_tool

    if not Path(nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    with tempfile.TemporaryDirectory() as directory:
        for pairs in (2048, 16384):  # 256 tokens, 2,048 tokens
            loops = {}
            for activation, move_bits in (("fp16", False), ("bf16", True)):
                kernel, elements, _ = grouped("fp8e4nv", True, pairs, move_bits, activation)
                sass = disassemble(kernel.asm["cubin"], Path(directory))[0]
                loops[activation] = main_loop_instructions(sass)
            fp16 = loops["fp16"]
            # both shapes run 4 warps: a thread converts its 1/128 of the tile's weight, a pair an instruction
            assert fp16["F2FP.F16.E4M3.UNPACK_B"] == elements // 256, (pairs, fp16)
            assert not [op for op in fp16 if op.startswith(("F2F.", "HMUL2", "LOP3", "PRMT"))], (pairs, fp16)
            assert sum(fp16.values()) < 0.7 * sum(loops["bf16"].values()), (pairs, fp16, loops["bf16"])
