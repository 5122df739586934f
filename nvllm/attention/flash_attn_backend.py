"""The CUDA backend: flash-attn's paged varlen attention for prefill and cascade's prefix pass, nvllm's Triton
kernel (`nvllm.ops.paged_decode_attention`) for decode steps."""

from __future__ import annotations

import torch

from nvllm.attention.backend import AttentionBackend, GraphSupport

# A decode step's KV is cut into splits, each read by a program of its own (one per row, KV head and split),
# until the step has about DECODE_PROGRAMS of them: a few rows alone would leave most of the GPU idle,
# while more splits than that only add partial results to combine. Measured on the H200, over 1 to 256
# rows and contexts of 256 to 4096 tokens (`python -m experiments.kernels.decode_attention_bench`):
# experiments/results/2026-12-01-h200-triton-decode-attention.md.
DECODE_PROGRAMS = 512
MAX_DECODE_KV_SPLITS = 32


class FlashAttnBackend(AttentionBackend):
    name = "flash_attn"
    requirement = "CUDA and the flash-attn package"
    graph_support = GraphSupport.ALWAYS
    block_size_multiple = 256  # paged flash-attn reads the KV cache in tiles of 256 tokens

    @classmethod
    def can_run(cls, device: str) -> bool:
        if not (device.startswith("cuda") and torch.cuda.is_available()):
            return False
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            return False
        return True

    @classmethod
    def decode_kv_splits(cls, num_rows: int, num_kv_heads: int) -> int:
        """A power of two: rows x KV heads x splits about DECODE_PROGRAMS."""
        splits = min(MAX_DECODE_KV_SPLITS, DECODE_PROGRAMS // (num_rows * num_kv_heads))
        return 1 << (splits.bit_length() - 1) if splits > 1 else 1
