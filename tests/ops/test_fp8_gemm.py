"""nvllm's fp8 Triton GEMM (`nvllm.ops.fp8_gemm`) against the exact product of its quantized operands: in
Triton's interpreter on the CPU at launch shapes whose tiles overhang every edge, and on the GPU at the
decode batches it takes; and the launch shape it picks by batch and weight."""

from __future__ import annotations

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
# different magnitudes, so that both scales matter
m, n, k = 40, 200, 272
x = torch.randn(m, k, generator=generator) * torch.logspace(-3, 3, m)[:, None]
w = torch.randn(n, k, generator=generator) * torch.logspace(-2, 2, n)[:, None]
(x_q, x_scale), (q, scale) = quantize_rows(x), quantize_rows(w)
exact = (x_q.float() @ q.float().T) * x_scale[:, None] * scale[None, :]
for config in [GemmConfig(64, 32, 128, 4, 2), GemmConfig(16, 64, 64, 4, 3), None]:
    ours = fp8_gemm(x_q, x_scale, q, scale, torch.float32, config)
    torch.testing.assert_close(ours, exact, atol=0, rtol=1e-5, msg=lambda m: f"{config}: {m}")
assert fp8_gemm(x_q[:0], x_scale[:0], q, scale, torch.bfloat16).shape == (0, n)
"""
    )


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
    assert chosen_config(MAX_ROWS + 1, 4096, 12288, 132) is None
    # a shape not measured: the picked launch shape up to UNMEASURED_MAX_ROWS rows, then cuBLAS
    assert chosen_config(UNMEASURED_MAX_ROWS, 1000, 512, 132) == gemm_config(UNMEASURED_MAX_ROWS, 1000, 132)
    assert chosen_config(UNMEASURED_MAX_ROWS + 1, 1000, 512, 132) is None


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [17, 64, 100, 256])
@pytest.mark.parametrize("shape", [(4096, 4096), (24576, 4096), (4096, 12288), (6144, 4096)])
def test_the_fp8_gemm_on_the_gpu_equals_the_exact_product_up_to_its_rounding(rows, shape):
    """Qwen3-8B's projections at decode batches: the same quantized operands multiplied in fp32, within the
    bf16 output's rounding (the fp32 accumulation's order apart)."""
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
