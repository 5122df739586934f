"""The dtypes a model may run in, by their config names, and what `model.dtype=auto` means; what the KV cache
is stored as (`cache.dtype`)."""

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
KV_CACHE_DTYPES = ("auto", "fp8")  # auto: the model's dtype; fp8: see nvllm.ops.fp8_kv_cache


def resolved_dtype(requested: str, on_cuda: bool) -> str:
    """The dtype name `model.dtype=requested` means: `auto` is bf16 on CUDA (its tensor cores' type) and fp32
    on the CPU (which has no fast bf16 matmuls to gain from)."""
    if requested != "auto":
        return requested
    return "bfloat16" if on_cuda else "float32"


def kv_cache_dtype(cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """What `cache.dtype=cache_dtype` stores K and V as, for a model running in `model_dtype`."""
    return torch.float8_e4m3fn if cache_dtype == "fp8" else model_dtype
