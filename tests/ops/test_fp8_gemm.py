"""nvllm's fp8 Triton GEMM (`nvllm.ops.fp8_gemm`) against the exact product of its quantized operands: in
Triton's interpreter on the CPU at launch shapes whose tiles overhang every edge, and on the GPU at the
decode batches it takes; the launch shape it picks by batch and weight; the small-batch kernel's too, and
its loop on the fp8 tensor cores compiled for sm_90."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from tests.helpers.triton_interpreter import run_in_interpreter


def test_the_fp8_gemm_equals_the_product_of_its_quantized_operands_in_the_interpreter():
    run_in_interpreter(
        """
import torch
from nvllm.ops.fp8 import quantize_rows
from nvllm.ops.fp8_gemm import GemmConfig, fp8_gemm
generator = torch.Generator().manual_seed(0)
# sizes off every tile (rows, columns and the reduction all masked at their last tile), rows of very
# different magnitudes, so that both scales matter; 16 rows and fewer take the small-batch kernel
n, k = 200, 272
w = torch.randn(n, k, generator=generator) * torch.logspace(-2, 2, n)[:, None]
q, scale = quantize_rows(w)
launches = {
    40: [GemmConfig(64, 32, 128, 4, 2), GemmConfig(16, 64, 64, 4, 3), None],
    **dict.fromkeys((1, 7, 16), [GemmConfig(16, 64, 128, 4, 2), GemmConfig(16, 128, 64, 4, 3), None]),
}
for m, configs in launches.items():
    x_q, x_scale = quantize_rows(torch.randn(m, k, generator=generator) * torch.logspace(-3, 3, m)[:, None])
    exact = (x_q.float() @ q.float().T) * x_scale[:, None] * scale[None, :]
    # fp32 sums in another order: within 1e-5 of each row's largest value (a value near zero that cancels
    # is as far from it as that)
    bound = 1e-5 * exact.abs().amax(dim=1, keepdim=True)
    for config in configs:
        ours = fp8_gemm(x_q, x_scale, q, scale, torch.float32, config)
        assert ((ours - exact).abs() <= bound).all(), (m, config, ((ours - exact).abs() / bound).max())
assert fp8_gemm(x_q[:0], x_scale[:0], q, scale, torch.bfloat16).shape == (0, n)
"""
    )


def test_the_small_batch_loop_multiplies_on_the_fp8_tensor_cores_converting_nothing():
    """Compiled for sm_90 on the CPU at Qwen3-8B's and Qwen3-30B-A3B's projections: fp8 MMAs (QGMMA) with
    the weight as their 64-row operand, and nothing in the loop that converts an element."""
    pytest.importorskip("triton")
    from experiments.kernels.fp8_weights_sass import converting_instructions, small_batch_gemm
    from experiments.kernels.hopper_sass import disassemble, main_loop_instructions, nvidia_tool
    from nvllm.ops.fp8_gemm import small_batch_config

    if not Path(nvidia_tool("ptxas")).exists():
        pytest.skip("this Triton has no NVIDIA backend tools")
    with tempfile.TemporaryDirectory() as directory:
        for n, k in ((6144, 4096), (24576, 4096), (5120, 2048)):
            config = small_batch_config(n, k, 132)
            kernel, _, _ = small_batch_gemm(n, k)
            sass = disassemble(kernel.asm["cubin"], Path(directory))[0]
            loop = main_loop_instructions(sass)
            # an MMA takes 64 of the weight's rows and 32 of the reduction
            assert loop["QGMMA.64"] == config.block_n // 64 * config.block_k // 32, (n, k, loop)
            assert list(converting_instructions(sass)) == ["SHF.R.S32.HI"], (n, k, loop)


def test_small_batches_take_wide_strips_only_where_every_sm_still_gets_a_program():
    pytest.importorskip("triton")
    from nvllm.ops.fp8_gemm import GemmConfig, small_batch_config

    assert small_batch_config(24576, 4096, 132) == GemmConfig(16, 128, 256, 4, 3)  # 192 programs
    assert small_batch_config(6144, 4096, 132) == GemmConfig(16, 64, 256, 4, 3)  # 48 would be too few
    assert small_batch_config(1024, 512, 132) == GemmConfig(16, 64, 128, 4, 4)  # a narrow reduction


def test_the_tile_follows_the_batch_and_leaves_a_program_for_nearly_every_sm():
    pytest.importorskip("triton")
    from nvllm.ops.fp8_gemm import GemmConfig, gemm_config

    # Qwen3-8B's o projection (4096 wide) and gate/up (24576) on 132 SMs
    assert gemm_config(256, 4096, 132) == GemmConfig(128, 64, 128, 8, 4)  # 2 x 64 programs
    assert gemm_config(128, 4096, 132) == GemmConfig(128, 32, 128, 8, 4)  # 128 programs
    assert gemm_config(64, 4096, 132) == GemmConfig(64, 32, 128, 4, 4)
    assert gemm_config(32, 24576, 132) == GemmConfig(64, 128, 128, 4, 4)  # 192 programs
    assert gemm_config(200, 6144, 132) == GemmConfig(128, 64, 128, 8, 4)  # 2 x 96 programs


def test_the_table_picks_by_band_of_rows_and_leaves_the_rest_to_cublas():
    pytest.importorskip("triton")
    from nvllm.ops.fp8_gemm import MAX_ROWS, UNMEASURED_MAX_ROWS, GemmConfig, chosen_config, gemm_config

    # Qwen3-8B's down projection: a band each up to 64, 128 and 256 rows
    assert chosen_config(17, 4096, 12288, 132) == GemmConfig(64, 32, 256, 4, 3)
    assert chosen_config(64, 4096, 12288, 132) == GemmConfig(64, 32, 256, 4, 3)
    assert chosen_config(65, 4096, 12288, 132) == GemmConfig(64, 64, 256, 4, 3)
    assert chosen_config(256, 4096, 12288, 132) == GemmConfig(64, 128, 256, 4, 3)
    # its gate/up: cuBLAS above 64 rows; nothing past MAX_ROWS
    assert chosen_config(64, 24576, 4096, 132) == GemmConfig(64, 64, 128, 4, 4)
    assert chosen_config(65, 24576, 4096, 132) is None
    # Qwen3-30B-A3B's q/k/v and o: the kernel at every decode batch it may take, none left to cuBLAS
    for n, k in ((5120, 2048), (2048, 4096)):
        assert all(chosen_config(m, n, k, 132) is not None for m in range(1, MAX_ROWS + 1))
    assert chosen_config(128, 2048, 4096, 132) == GemmConfig(64, 32, 256, 4, 3)
    assert chosen_config(129, 2048, 4096, 132) == GemmConfig(64, 64, 256, 4, 3)
    assert chosen_config(MAX_ROWS + 1, 4096, 12288, 132) is None
    # a shape not measured: the picked launch shape up to UNMEASURED_MAX_ROWS rows, then cuBLAS
    assert chosen_config(UNMEASURED_MAX_ROWS, 1000, 512, 132) == gemm_config(UNMEASURED_MAX_ROWS, 1000, 132)
    assert chosen_config(UNMEASURED_MAX_ROWS + 1, 1000, 512, 132) is None


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 7, 16, 17, 64, 100, 256])
@pytest.mark.parametrize(
    "shape", [(4096, 4096), (24576, 4096), (4096, 12288), (6144, 4096), (5120, 2048), (2048, 4096)]
)
def test_the_fp8_gemm_on_the_gpu_equals_the_exact_product_up_to_its_rounding(rows, shape):
    """Qwen3-8B's and Qwen3-30B-A3B's projections at decode batches (at most 16 rows computed transposed):
    the same quantized operands multiplied in fp32, within the bf16 output's rounding (the fp32
    accumulation's order apart)."""
    from nvllm.ops.fp8 import quantize_rows
    from nvllm.ops.fp8_gemm import fp8_gemm

    torch.manual_seed(0)
    n, k = shape
    (x_q, x_scale), (q, scale) = (
        quantize_rows(torch.randn(rows, k, device="cuda")),
        quantize_rows(torch.randn(n, k, device="cuda")),
    )
    exact = (x_q.float() @ q.float().T) * x_scale[:, None] * scale[None, :]
    ours = fp8_gemm(x_q, x_scale, q, scale, torch.bfloat16).float()
    assert ((ours - exact).abs() / exact.abs().clamp_min(1e-3)).median() < 2**-8
    torch.testing.assert_close(ours, exact, atol=1e-2 * exact.abs().max().item(), rtol=2**-7)
