"""The flash-attn backend: paged varlen attention for prefill, `flash_attn_with_kvcache` for decode."""

from __future__ import annotations

import torch

from nvllm.attention.backend import AttentionBackend

# Decode steps of at most this many sequences, none longer than this many tokens, attend without splitting
# their KV: flash-attn's own choice splits to fill the GPU, and the combine kernel that then follows costs
# more than the split saves for small batches over short contexts (measured on the H200:
# experiments/results/2026-11-29-h200-qwen3-0.6b-decode-rounds.md).
ONE_SPLIT_MAX_BATCH = 32
ONE_SPLIT_MAX_CONTEXT = 768


class FlashAttnBackend(AttentionBackend):
    name = "flash_attn"
    requirement = "CUDA and the flash-attn package"
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

    def decode_kv_splits(self, batch_size: int, longest_context: int) -> int:
        one_split = batch_size <= ONE_SPLIT_MAX_BATCH and longest_context <= ONE_SPLIT_MAX_CONTEXT
        return 1 if one_split else 0
