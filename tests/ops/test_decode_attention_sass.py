"""The decode kernel's machine code for Hopper, compiled on the CPU: over an fp8 cache its loop reads no
shared memory a byte at a time, moves no registers into the MMAs' operands, and costs about the
instructions a token that the bf16 kernel's does (which reads twice the bytes a token, at the memory's
speed on an H200), so halving the bytes can pay in full."""

import pytest

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def loops():
    from pathlib import Path

    from experiments.kernels import decode_attention_sass as sass_tool

    if not Path(sass_tool.nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    import tempfile

    loops = {}
    with tempfile.TemporaryDirectory() as directory:
        for cache in ("bf16", "fp8"):
            kernel = sass_tool.compile_kernel(cache, group=2, tile=128)
            sass, _ = sass_tool.disassemble(kernel.asm["cubin"], Path(directory))
            loops[cache] = sass_tool.main_loop_instructions(sass)
    return loops


def test_an_fp8_tile_is_read_from_shared_memory_in_words_not_bytes(loops):
    assert loops["fp8"]["F2FP.F16.E4M3.UNPACK_B"] == 128  # 2 x 128 x 128 elements / 128 threads, two an op
    assert not any(op.startswith("LDS.U8") for op in loops["fp8"])


def test_the_fp8_loop_moves_no_registers_and_costs_what_the_bf16_loop_does_a_token(loops):
    assert loops["fp8"]["IMAD.MOV.U32"] + loops["fp8"]["MOV"] <= 4
    assert sum(loops["fp8"].values()) <= 1.1 * sum(loops["bf16"].values())
