"""fp8 weights converted to bf16 by moving bits (`nvllm.ops.e4m3_to_bf16`): the PTX, run by a model of its
five instructions here, gives every e4m3 value exactly in every byte of a word; compiled for Hopper, the
matmul loops that use it leave the conversion units alone; on the GPU the skinny and grouped matmuls give the
same bits either way."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch

FP8 = torch.float8_e4m3fn
NAN_CODES = (0x7F, 0xFF)  # e4m3fn's NaNs: quantized weights never hold them


def as_bf16(halves: list[int]) -> torch.Tensor:
    """16-bit patterns as bf16 values (through int32: torch narrows integers by wrapping)."""
    return torch.tensor(halves, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def run_ptx(asm: str, word: int) -> list[int]:
    """The 32-bit output registers of `asm` (the instructions `E4M3X4_TO_BF16X4` uses) for input `$2 = word`,
    each instruction as the PTX ISA defines it."""
    registers = {"$2": word}

    def value(operand: str) -> int:
        return registers[operand] if operand in registers else int(operand, 0)

    def bf16(bits: int) -> torch.Tensor:
        return as_bf16([bits])

    for statement in asm.strip("{} ").split(";"):
        parts = re.split(r"[\s,]+", statement.strip())
        op, args = parts[0], parts[1:]
        if not op or op == ".reg":
            continue
        if op == "mov.b32":
            registers[args[0]] = value(args[1])
        elif op == "prmt.b32":  # default mode: a nibble picks a byte of {b, a}; its bit 3 copies the sign
            source = value(args[1]) | value(args[2]) << 32
            result = 0
            for i in range(4):
                nibble = value(args[3]) >> (4 * i) & 0xF
                byte = source >> (8 * (nibble & 7)) & 0xFF
                if nibble & 8:
                    byte = 0xFF if byte & 0x80 else 0
                result |= byte << (8 * i)
            registers[args[0]] = result
        elif op == "shr.s32":
            signed = value(args[1]) - (1 << 32) * (value(args[1]) >> 31)
            registers[args[0]] = (signed >> value(args[2])) & 0xFFFFFFFF
        elif op == "and.b32":
            registers[args[0]] = value(args[1]) & value(args[2])
        elif op == "mul.rn.bf16x2":
            halves = []
            for shift in (0, 16):
                a, b = (bf16(value(arg) >> shift & 0xFFFF) for arg in args[1:3])
                product = (a.double() * b.double()).to(torch.bfloat16)  # round to nearest even
                halves.append(product.view(torch.int16).item() & 0xFFFF)
            registers[args[0]] = halves[0] | halves[1] << 16
        else:
            raise AssertionError(f"an instruction this model does not know: {statement!r}")
    return [registers["$0"], registers["$1"]]


def test_the_ptx_gives_every_e4m3_value_exactly_in_every_byte_of_a_word():
    pytest.importorskip("triton")
    from nvllm.ops.e4m3_to_bf16 import E4M3X4_TO_BF16X4

    codes = [code for code in range(256) if code not in NAN_CODES]
    expected = torch.tensor(codes, dtype=torch.uint8).view(FP8).to(torch.bfloat16)
    for first in range(len(codes)):
        elements = [codes[(first + i * 61) % len(codes)] for i in range(4)]  # each code in each byte
        word = sum(code << (8 * i) for i, code in enumerate(elements))
        low, high = run_ptx(E4M3X4_TO_BF16X4.value, word)
        halves = [low & 0xFFFF, low >> 16, high & 0xFFFF, high >> 16]
        ours = as_bf16(halves)
        want = expected[[(first + i * 61) % len(codes) for i in range(4)]]
        assert torch.equal(ours.view(torch.int16), want.view(torch.int16)), (hex(word), ours, want)


def test_a_matmul_loop_moving_bits_leaves_the_conversion_units_alone():
    """Compiled for sm_90 on the CPU: the skinny kernel over fp8 weights converts through F2F (the
    conversion units) with Triton's conversion and not at all when it moves bits."""
    pytest.importorskip("triton")
    from experiments.kernels.fp8_weights_sass import skinny
    from experiments.kernels.hopper_sass import disassemble, main_loop_instructions, nvidia_tool

    if not Path(nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    loops = {}
    with tempfile.TemporaryDirectory() as directory:
        for move_bits in (False, True):
            kernel, _, _ = skinny("fp8e4nv", 6144, 4096, gated=False, move_bits=move_bits)
            loops[move_bits] = main_loop_instructions(disassemble(kernel.asm["cubin"], Path(directory))[0])
    converting = [op for op in loops[False] if op.startswith(("F2F.", "F2FP."))]
    assert converting, "Triton's conversion goes through the conversion units"
    assert not [op for op in loops[True] if op.startswith(("F2F.", "F2FP."))]
    # a 64 x 256 tile over 4 warps: 128 elements a thread, a multiply a pair
    assert loops[True]["HMUL2.BF16_V2"] == 64


@pytest.mark.gpu
@pytest.mark.parametrize("rows, gated", [(1, False), (16, True), (7, False)])
def test_the_skinny_kernel_gives_the_same_bits_moving_them(rows, gated, monkeypatch):
    """Every e4m3 code but the NaNs in the weight, scale 1: both conversions are exact, so the products are
    equal to the bit."""
    from nvllm.ops import e4m3_to_bf16
    from nvllm.ops.skinny_matmul import skinny_config, skinny_matmul

    torch.manual_seed(0)
    n = 2 * 512 if gated else 512
    codes = torch.tensor([c for c in range(256) if c not in NAN_CODES], dtype=torch.uint8)
    weight = codes[torch.randint(0, len(codes), (n, 2048))].view(FP8).cuda()
    scale = torch.rand(n, device="cuda") + 0.5
    x = torch.randn(rows, 2048, device="cuda", dtype=torch.bfloat16)
    config = skinny_config(*weight.shape, gated=gated)
    results = {}
    for enabled in (False, True):
        monkeypatch.setattr(e4m3_to_bf16, "ENABLED", enabled)
        results[enabled] = skinny_matmul(x, weight, config, gated=gated, weight_scale=scale)
    assert torch.equal(results[True], results[False])


@pytest.mark.gpu
@pytest.mark.parametrize("num_tokens", [1, 64, 2048])
def test_the_grouped_matmuls_give_the_same_bits_moving_them(num_tokens, monkeypatch):
    from nvllm.ops import e4m3_to_bf16
    from nvllm.ops.fp8 import quantize_rows
    from nvllm.ops.moe_triton import grouped_experts
    from tests.models.test_qwen3_moe_gpu import layer_inputs

    x, gate_up, down, weights, ids = layer_inputs(num_tokens, seed=num_tokens)
    (gate_up, gate_up_scale), (down, down_scale) = quantize_rows(gate_up), quantize_rows(down)
    x, weights = x.to(torch.bfloat16), weights.to(torch.bfloat16)
    results = {}
    for enabled in (False, True):
        monkeypatch.setattr(e4m3_to_bf16, "ENABLED", enabled)
        results[enabled] = grouped_experts(x, gate_up, down, weights, ids, gate_up_scale, down_scale)
    assert torch.equal(results[True], results[False])
