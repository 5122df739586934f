"""Memory accounting before anything is allocated: KV bytes per token and per block for a preset's shape,
and `check_fits` refusing, with the numbers, a config that does not fit what the device has free."""

import dataclasses

import pytest
import torch

from nvllm.config import CacheConfig, EngineConfig, ParallelConfig
from nvllm.models.presets import model_preset
from nvllm.runner import memory
from nvllm.runner.memory import check_fits, kv_bytes_per_block, kv_bytes_per_token

GIB = 2**30
# Qwen3-8B: 36 layers, 8 KV heads of 128, hidden 4096, MLP 12288, vocabulary 151936, LM head not tied
QWEN3_8B = dataclasses.replace(model_preset("qwen3-8b"), dtype="bfloat16")
# K and V, every layer, every KV head, 2 bytes an element
KV_BYTES_PER_TOKEN = 2 * 36 * 8 * 128 * 2
# per layer: q, o 4096x4096; k, v 4096x1024; gate, up, down 4096x12288; 2 norms of 4096, q/k norms of 128;
# plus the embedding, the LM head (151936x4096 each) and the final norm
QWEN3_8B_PARAMETERS = 36 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128) + (
    2 * 151936 * 4096 + 4096
)


def qwen3_8b(tensor_parallel_size: int, **cache) -> EngineConfig:
    return EngineConfig(
        model=QWEN3_8B, cache=CacheConfig(**cache), parallel=ParallelConfig(tensor_parallel_size)
    )


def test_kv_bytes_for_qwen3_8b():
    assert QWEN3_8B_PARAMETERS == 8_190_735_360  # Qwen3-8B's published count
    assert kv_bytes_per_token(QWEN3_8B, torch.bfloat16) == KV_BYTES_PER_TOKEN == 147_456
    assert kv_bytes_per_token(QWEN3_8B, torch.float32, tensor_parallel_size=2) == KV_BYTES_PER_TOKEN
    config = qwen3_8b(2, block_size=256)
    assert kv_bytes_per_block(config, torch.bfloat16) == 256 * KV_BYTES_PER_TOKEN // 2 == 18 * 2**20


def test_an_fp8_kv_cache_counts_a_byte_an_element(monkeypatch):
    config = qwen3_8b(1, block_size=256, dtype="fp8")
    assert kv_bytes_per_block(config, torch.bfloat16) == 256 * KV_BYTES_PER_TOKEN // 2 == 18 * 2**20
    with_available(monkeypatch, 1)  # the check counts the fp8 cache's bytes too
    message = "needs 15.3 GiB of weights (bfloat16) and 1.8 GiB of KV cache per rank"
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_fits(
            dataclasses.replace(config, cache=CacheConfig(dtype="fp8", num_blocks=100)),
            torch.bfloat16,
            "cuda:0",
        )


def with_available(monkeypatch, available: int | None) -> list[str]:
    """`available` bytes free on any device; the devices asked about."""
    asked = []
    monkeypatch.setattr(memory, "available_bytes", lambda device: asked.append(device) or available)
    return asked


def test_a_gpu_holds_one_ranks_share(monkeypatch):
    config = qwen3_8b(2, num_blocks=100)
    # half the weights (2 bytes each) and 100 blocks of half the KV heads
    needed = QWEN3_8B_PARAMETERS * 2 // 2 + 100 * 256 * KV_BYTES_PER_TOKEN // 2
    assert with_available(monkeypatch, needed) == []
    check_fits(config, torch.bfloat16, "cuda:1")
    with_available(monkeypatch, needed - 1)
    message = (
        "qwen3-8b needs 7.6 GiB of weights (bfloat16) and 1.8 GiB of KV cache per rank, but cuda:1 has "
        "9.4 GiB free"
    )
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_fits(config, torch.bfloat16, "cuda:1")


def test_a_gpu_without_fixed_blocks_counts_the_weights_only(monkeypatch):
    asked = with_available(monkeypatch, QWEN3_8B_PARAMETERS * 2)
    check_fits(qwen3_8b(1), torch.bfloat16, "cuda")
    assert asked == ["cuda"]
    with_available(monkeypatch, QWEN3_8B_PARAMETERS * 2 - 1)
    with pytest.raises(
        ValueError, match=r"15\.3 GiB of weights \(bfloat16\) and 0\.0 GiB of KV cache per rank"
    ):
        check_fits(qwen3_8b(1), torch.bfloat16, "cuda")


def test_the_cpu_holds_every_ranks_share_and_its_kv_budget(monkeypatch):
    config = qwen3_8b(2, cpu_memory_gib=1.5)
    needed = 2 * (QWEN3_8B_PARAMETERS * 4 // 2 + int(1.5 * GIB))  # float32 weights
    with_available(monkeypatch, needed)
    check_fits(config, torch.float32, "cpu")
    with_available(monkeypatch, needed - 1)
    with pytest.raises(
        ValueError, match=r"15\.3 GiB of weights .* and 1\.5 GiB of KV cache on each of 2 ranks"
    ):
        check_fits(config, torch.float32, "cpu")


def test_unknown_free_memory_accepts(monkeypatch):
    with_available(monkeypatch, None)
    check_fits(qwen3_8b(1, num_blocks=10**6), torch.bfloat16, "cpu")


def test_fp8_weights_are_named_in_the_message(monkeypatch):
    config = dataclasses.replace(qwen3_8b(1), model=dataclasses.replace(QWEN3_8B, quantization="fp8"))
    with_available(monkeypatch, GIB)
    with pytest.raises(ValueError, match=r"of weights \(bfloat16, fp8 matmuls\)"):
        check_fits(config, torch.bfloat16, "cuda")
