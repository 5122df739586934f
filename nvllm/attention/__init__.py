"""Attention backends: each one builds its own metadata from a step's inputs and owns the rules that follow
from its kernels (the padding, the decode test, KV splits, block-table width, the block sizes it serves).
The `torch.library` custom ops in `nvllm.ops` run underneath them."""

from nvllm.attention.backend import (
    AttentionBackend,
    AttentionMetadata,
    GraphSupport,
    one_query_per_sequence,
    padded_prefill_sizes,
)
from nvllm.attention.flash_attn_backend import FlashAttnBackend
from nvllm.attention.padding import padded_size
from nvllm.attention.torch_backend import TorchBackend

BACKENDS: dict[str, type[AttentionBackend]] = {"flash_attn": FlashAttnBackend, "torch": TorchBackend}


def resolve_backend(requested: str, device: str, block_size: int) -> type[AttentionBackend]:
    """The backend class `attention.backend=requested` means on `device` (`auto`: flash-attn where it can
    run, else the torch reference), after checking that it can run there with this block size."""
    if requested == "auto":
        requested = "flash_attn" if FlashAttnBackend.can_run(device) else "torch"
    backend = BACKENDS[requested]
    backend.check_block_size(block_size)
    if not backend.can_run(device):
        raise ValueError(f"attention.backend={requested} needs {backend.requirement} (device={device})")
    return backend


__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "BACKENDS",
    "FlashAttnBackend",
    "GraphSupport",
    "TorchBackend",
    "one_query_per_sequence",
    "padded_prefill_sizes",
    "padded_size",
    "resolve_backend",
]
