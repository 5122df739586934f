"""The decode kernel's machine code for Hopper, compiled on the CPU: over an fp8 cache its loop reads the
value tiles from shared memory as words, not a byte at a time as it did when they were converted in the dot's
layout (Hopper has no transposing load of bytes); and its software pipeline keeps loads in flight."""

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("triton")


def test_an_fp8_value_tile_is_read_from_shared_memory_in_words_not_bytes():
    from experiments.kernels.decode_attention_sass import compile_kernel
    from experiments.kernels.hopper_sass import disassemble, main_loop_instructions, nvidia_tool

    if not Path(nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    with tempfile.TemporaryDirectory() as directory:
        kernel = compile_kernel("fp8", group=2, tile=128)
        sass, _ = disassemble(kernel.asm["cubin"], Path(directory))
    loop = main_loop_instructions(sass)
    assert loop["F2FP.F16.E4M3.UNPACK_B"] == 128  # 2 x 128 x 128 elements / 128 threads, two an instruction
    assert not any(op.startswith("LDS.U8") for op in loop)


@pytest.mark.parametrize("cache", ["bf16", "fp8"])
def test_three_pipeline_stages_keep_the_next_tiles_loads_in_flight_during_a_tiles_dots(cache):
    """At 3 stages Triton's pipeline gives each tile's KV loads two shared-memory buffers and waits for one
    tile's loads at a time; with the block number read in the iteration whose loads it addresses, it gave
    one buffer and waited for every load at each iteration's top."""
    import re

    from experiments.kernels.decode_attention_sass import compile_kernel
    from experiments.kernels.hopper_sass import nvidia_tool

    if not Path(nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    ttgir = compile_kernel(cache, group=2, tile=64, num_stages=3).asm["ttgir"]
    buffers = re.findall(r"ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x64x", ttgir)
    assert buffers and all(count == "2" for count in buffers), buffers
    waits = re.findall(r"ttg\.async_wait .*\{num = (\d+) : i32\}", ttgir)
    assert any(int(pending) > 0 for pending in waits), waits
