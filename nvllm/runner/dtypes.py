"""The dtypes a model may run in, by their config names, and what `model.dtype=auto` means."""

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolved_dtype(requested: str, on_cuda: bool) -> str:
    """The dtype name `model.dtype=requested` means: `auto` is bf16 on CUDA (its tensor cores' type) and fp32
    on the CPU (which has no fast bf16 matmuls to gain from)."""
    if requested != "auto":
        return requested
    return "bfloat16" if on_cuda else "float32"
