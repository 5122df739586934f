"""What one rank's model and KV cache take in memory, known before anything is allocated, so that a model
too large for the machine is refused with the numbers instead of being killed for memory minutes later."""

from __future__ import annotations

from pathlib import Path

import torch

from nvllm.config import EngineConfig, ModelConfig
from nvllm.models.weights import parameter_bytes
from nvllm.runner.dtypes import kv_cache_dtype

GIB = 2**30


def kv_bytes_per_token(model: ModelConfig, dtype: torch.dtype, tensor_parallel_size: int = 1) -> int:
    """Bytes of K and V that one token holds over every layer, on one of `tensor_parallel_size` ranks (its
    share of the KV heads; 1: all ranks together)."""
    kv_heads = model.num_key_value_heads // tensor_parallel_size
    return 2 * model.num_hidden_layers * kv_heads * model.head_dim * dtype.itemsize


def kv_bytes_per_block(config: EngineConfig, dtype: torch.dtype) -> int:
    """Bytes of K and V for one block of every layer, on one rank (its share of the KV heads), for a model
    running in `dtype` and a cache of `cache.dtype`."""
    kv_dtype = kv_cache_dtype(config.cache.dtype, dtype)
    per_token = kv_bytes_per_token(config.model, kv_dtype, config.parallel.tensor_parallel_size)
    return config.cache.block_size * per_token


def cpu_kv_budget_bytes(config: EngineConfig) -> int:
    """The KV cache's budget on the CPU, where there is no device memory to measure."""
    return int(config.cache.cpu_memory_gib * GIB)


def weight_bytes(config: EngineConfig, dtype: torch.dtype) -> int:
    """Bytes of one rank's weights: an even share of the sharded ones (all but the norms, which are small)."""
    return sum(parameter_bytes(config.model, dtype).values()) // config.parallel.tensor_parallel_size


def weights_dtype(model: ModelConfig) -> str:
    """How the weights are stored, for a message: the dtype, and fp8 for the quantized matmuls."""
    return model.dtype if model.quantization == "none" else f"{model.dtype}, {model.quantization} matmuls"


def available_bytes(device: str) -> int | None:
    """Memory free for a new allocation on `device` (None where it cannot be read)."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(device)[0]
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    kib = next((line.split()[1] for line in meminfo.splitlines() if line.startswith("MemAvailable:")), None)
    return int(kib) * 1024 if kib is not None else None


def check_fits(config: EngineConfig, dtype: torch.dtype, device: str) -> None:
    """Raise a ValueError with the numbers when the weights and the KV cache the config asks for (on the
    CPU its budget, elsewhere a fixed `cache.num_blocks` if set) cannot fit in what `device` has free.
    Called once, before any rank starts: on the CPU every rank's share is counted (they share the host's
    memory); a GPU holds one rank's, and the ranks' GPUs are taken to be alike."""
    available = available_bytes(device)
    if available is None:
        return
    weights = weight_bytes(config, dtype)
    kv = 0
    if config.cache.num_blocks is not None:
        kv = config.cache.num_blocks * kv_bytes_per_block(config, dtype)
    elif not device.startswith("cuda"):
        kv = cpu_kv_budget_bytes(config)
    ranks_here = 1 if device.startswith("cuda") else config.parallel.tensor_parallel_size
    if (weights + kv) * ranks_here > available:
        ranks = f" on each of {ranks_here} ranks" if ranks_here > 1 else " per rank"
        stored = weights_dtype(config.model)
        raise ValueError(
            f"{config.model.name} needs {weights / GIB:.1f} GiB of weights ({stored}) and "
            f"{kv / GIB:.1f} GiB of KV cache{ranks}, but {device} has {available / GIB:.1f} GiB free: "
            "choose a smaller model, a smaller cache (cache.num_blocks, cache.cpu_memory_gib) or more ranks"
        )
