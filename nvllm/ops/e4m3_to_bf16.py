"""fp8 e4m3 weights converted to bf16 in registers by moving bits, off the GPU's conversion units.

A kernel that multiplies bf16 activations by fp8 weights converts every weight element it reads. Triton
converts e4m3 to bf16 in two steps, pairs to fp16 (`F2FP`), then each element to bf16 (`F2F`), both on the
SM's conversion units, which take 16 elements a cycle: less than HBM delivers an SM in fp8 bytes. The skinny
matmul and the MoE grouped matmuls then read fp8 weights no faster than bf16 ones, though they are half the
bytes (experiments/results/2026-12-04-cpu-fp8-weight-conversion.md).

Here the bits move instead. An e4m3 byte `s eeee mmm`, placed in a bf16 as `s 0000eeee mmm0000`, is the same
number times 2^-120, a normal e4m3 value and a subnormal one alike (the exponent fields differ by a fixed
bias, 127 - 7, and both formats read a zero exponent field as subnormal); one bf16x2 multiply by 2^120 then
gives the value exactly. For four elements in a 32-bit word: a byte permute that places two bytes in the
high bytes of the word's halves (with the lower byte's sign copied into the byte between them), an
arithmetic shift by four, a mask and the multiply, each pair on the integer and FMA pipes.

Only for bf16 dots: a kernel that multiplies on the CUDA cores in fp32 (the skinny experts,
`nvllm.ops.skinny_matmul.fma_matmul`) takes Triton's conversion, e4m3 pairs to f16 in one instruction, then
to fp32, which issues fewer instructions than moving bits to bf16 first and ran a single stream of
Qwen3-30B-A3B faster (experiments/results/2026-12-05-h200-moe-aims.md).

`ENABLED` is the switch, which the engine sets from `model.fp8_move_bits`; Triton's interpreter, which runs
no PTX, always takes Triton's own conversion. Both conversions give the same bits; the times of each are in
experiments/results/2026-12-05-h200-ab-candidates.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ENABLED = True  # model.fp8_move_bits

# $2: four e4m3 elements, the first in the lowest byte; $0, $1: the first two and the last two as bf16x2.
# prmt 0x1804: bytes (zero, e0, sign(e0), e1); 0x3A24: (zero, e2, sign(e2), e3). After the shift the high
# half's sign sits in bit 31 and the low half's in bit 15 (brought in from the sign byte); the mask keeps
# the sign and the seven exponent and mantissa bits of each half. 0x7B80 is 2^120 in bf16.
E4M3X4_TO_BF16X4 = tl.constexpr(
    "{ .reg .b32 t, s, c; mov.b32 c, 0x7B807B80;"
    " prmt.b32 t, $2, 0, 0x1804; shr.s32 s, t, 4; and.b32 s, s, 0x87F087F0; mul.rn.bf16x2 $0, s, c;"
    " prmt.b32 t, $2, 0, 0x3A24; shr.s32 s, t, 4; and.b32 s, s, 0x87F087F0; mul.rn.bf16x2 $1, s, c; }"
)


def moves_bits(weight: torch.Tensor, activations: torch.Tensor) -> bool:
    """Whether a kernel multiplying `activations` by `weight` converts the weight by moving bits: fp8
    weights against bf16 activations on a GPU, with `ENABLED`."""
    return (
        ENABLED
        and weight.is_cuda
        and weight.dtype == torch.float8_e4m3fn
        and activations.dtype == torch.bfloat16
    )


@triton.jit
def to_dot_dtype(w, dtype: tl.constexpr, MOVE_BITS: tl.constexpr):
    """A weight tile `w` in `dtype` for a dot: an fp8 one by moving bits where `MOVE_BITS` (`moves_bits`;
    `dtype` is then bf16), else by Triton's conversion (a no-op for a weight already in `dtype`)."""
    if MOVE_BITS:
        return tl.inline_asm_elementwise(
            E4M3X4_TO_BF16X4,
            "=r,=r,r",
            [w.to(tl.uint8, bitcast=True)],
            dtype=tl.bfloat16,
            is_pure=True,
            pack=4,
        )
    return w.to(dtype)
