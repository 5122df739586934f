"""The CUDA backend: flash-attn's paged varlen attention for prefill and cascade's prefix pass, nvllm's Triton
kernel (`nvllm.ops.paged_decode_attention`) for decode steps."""

from __future__ import annotations

import torch

from nvllm.attention.backend import AttentionBackend


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
