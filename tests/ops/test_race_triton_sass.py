"""The race kernel's machine code for Hopper, compiled on the CPU: its loop reads the logits in 16-byte
vectors and takes its two logarithms an element on the SFU (one instruction each), not as the precise
polynomial `tl.log2` compiles to, which made the loop over twice as long."""

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("triton")


def test_the_race_loop_loads_vectors_and_takes_fast_logarithms():
    from experiments.kernels import hopper_sass
    from nvllm.ops import race_triton

    if not Path(hopper_sass.nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    pointers = ("logits_ptr", "inv_temperatures_ptr", "noise_scales_ptr", "best_scores_ptr")
    signature = {
        "logits_ptr": "*bf16",
        "logits_stride": "i32",
        "inv_temperatures_ptr": "*fp32",
        "noise_scales_ptr": "*fp32",
        "best_scores_ptr": "*fp32",
        "best_tokens_ptr": "*i32",
        "vocab": "i32",
        "seed": "i32",
        "chunk_len": "i32",
        "num_chunks": "i32",
    }
    constants = {"BLOCK": race_triton.BLOCK, "TINY_NOISE": race_triton.TINY, "FAST_LOG": True}
    # as a launch specializes them: Qwen3's vocabulary and the chunks' length are multiples of 16
    aligned = (*pointers, "best_tokens_ptr", "logits_stride", "vocab", "chunk_len")
    kernel = hopper_sass.compile_for_hopper(
        race_triton._race_chunks_kernel, signature, constants, aligned, race_triton.NUM_WARPS, 3
    )
    with tempfile.TemporaryDirectory() as directory:
        sass, _ = hopper_sass.disassemble(kernel.asm["cubin"], Path(directory))
    loop = hopper_sass.main_loop_instructions(sass)
    elements_per_thread = race_triton.TILE // (race_triton.NUM_WARPS * 32)
    assert loop["MUFU.LG2"] == 2 * elements_per_thread
    assert loop["LDG.E.128"] == elements_per_thread // 8  # 8 bf16 logits a load
    assert sum(loop.values()) < 40 * elements_per_thread
