"""A config as the engine takes it: built from the Python API's keywords (`engine_config`) or an experiment's
plain values (`engine_config_from_dict`), validated against the choices their owners declare, and resolved
for this machine once (`resolve`: the device, the attention backend, the dtype, whether to compile), so that
nothing downstream decides them again."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import fields
from typing import Any

import torch

from nvllm.attention import BACKENDS, resolve_backend
from nvllm.attention.cascade import CASCADE_MODES
from nvllm.config import QUANTIZATIONS, EngineConfig, ModelConfig, checked_value, to_dataclass
from nvllm.models.hf_config import model_from_checkpoint
from nvllm.models.hub import model_checkpoint
from nvllm.models.presets import model_preset
from nvllm.runner.dtypes import DTYPES, KV_CACHE_DTYPES, resolved_dtype
from nvllm.runner.prefill_warm_up import MODES as PREFILL_WARM_UP_MODES
from nvllm.runner.prefill_warm_up import resolved_mode as resolved_prefill_warm_up
from nvllm.sampling.sampler import COMPILE_MODES as SAMPLER_COMPILE_MODES
from nvllm.scheduler.policy import RANKS


def one_of(choices) -> str:
    """`a, b or c`: the choices as an error message lists them."""
    *rest, last = choices
    return f"{', '.join(rest)} or {last}" if rest else last


# nano-vLLM's keyword names (and our own flat names) → dotted config keys, for `LLM(path, **overrides)`.
FLAT_KEYS = {
    "enforce_eager": "compile.enabled",
    "tensor_parallel_size": "parallel.tensor_parallel_size",
    "kvcache_block_size": "cache.block_size",
    "num_kvcache_blocks": "cache.num_blocks",
    "gpu_memory_utilization": "cache.gpu_memory_utilization",
    "enable_prefix_caching": "cache.enable_prefix_caching",
    "kv_cache_dtype": "cache.dtype",  # vLLM's name
    "quantization": "model.quantization",  # vLLM's name (None: "none")
    "max_num_seqs": "scheduler.max_num_seqs",
    "max_num_batched_tokens": "scheduler.max_num_batched_tokens",
    "max_model_len": "scheduler.max_model_len",
    "chunked_prefill": "scheduler.chunked_prefill",
    "num_decode_steps": "scheduler.num_decode_steps",
    "overlap_rounds": "scheduler.overlap_rounds",
    "scheduling_policy": "scheduler.policy",  # vLLM's name
    "max_logprobs": "scheduler.max_logprobs",
    "attention_backend": "attention.backend",
    "profile": "profile.enabled",
    "dtype": "model.dtype",
    "revision": "model.revision",  # vLLM's name
    "device": "device",
    "seed": "seed",
}


def engine_config(model: str | None = None, **overrides: Any) -> EngineConfig:
    """`LLM(model, **overrides)`: a checkpoint dir, a preset name, a hub id (`org/name`) or None (Qwen3-0.6B,
    random weights); overrides by nano-vLLM's flat names or as `group__key`. Validated and resolved."""
    if model is not None and not isinstance(model, str | os.PathLike):
        raise ValueError(f"model={model!r} must be a checkpoint directory, a preset name, a hub id or None")
    nested: dict[str, Any] = {}
    defaults = EngineConfig()
    for key, value in overrides.items():
        dotted = FLAT_KEYS.get(key, key.replace("__", "."))
        if key == "enforce_eager":
            value = not checked_value(key, value, bool)
        if key == "quantization" and value is None:  # vLLM's default
            value = "none"
        group, _, leaf = dotted.rpartition(".")
        schema = getattr(defaults, group, None) if group else defaults
        if not dataclasses.is_dataclass(schema) or leaf not in {f.name for f in fields(schema)}:
            raise ValueError(f"unknown LLM argument {key!r}; known: {sorted(FLAT_KEYS)} or group__key")
        target = nested.setdefault(group, {}) if group else nested
        target[leaf] = value
    name = os.fspath(model) if model is not None else ModelConfig.name
    model_config = checkpoint_model(name, nested.get("model", {}).get("revision")) or model_preset(name)
    config = to_dataclass(EngineConfig, nested, EngineConfig(model=model_config))
    return resolve(config)


def checkpoint_model(name: str, revision: str | None, base: ModelConfig | None = None) -> ModelConfig | None:
    """The architecture of the checkpoint `name` stands for (a directory, or a hub id's snapshot: see
    `model_checkpoint`) over `base`, named by the hub id where it is one (a snapshot's directory is named
    by a commit hash); None where `name` is a preset."""
    checkpoint = model_checkpoint(name, revision)
    if checkpoint is None:
        return None
    model = model_from_checkpoint(checkpoint, base)
    return model if checkpoint == os.path.expanduser(name) else dataclasses.replace(model, name=name)


def engine_config_from_dict(values: dict) -> EngineConfig:
    """An engine config from nested plain values (the engine's groups of a composed experiment config);
    `model.path` set (a directory or a hub id): the checkpoint's architecture over the rest. Validated and
    resolved."""
    config = to_dataclass(EngineConfig, values)
    if (path := config.model.path) is not None:
        model = checkpoint_model(path, config.model.revision, config.model)
        if model is None:
            raise ValueError(f"model.path={path!r} names a preset: model={path} builds it (random weights)")
        config = dataclasses.replace(config, model=model)
    return resolve(config)


def validate(config: EngineConfig) -> None:
    """Every config error the engine can detect before it allocates anything, as one clear ValueError."""
    model, cache, sched, tp = (
        config.model,
        config.cache,
        config.scheduler,
        config.parallel.tensor_parallel_size,
    )
    problems = []
    if model.dtype not in (dtypes := ("auto", *DTYPES)):
        problems.append(f"model.dtype={model.dtype!r} must be {one_of(dtypes)}")
    if model.quantization not in QUANTIZATIONS:
        choices = ", ".join(QUANTIZATIONS)
        problems.append(f"model.quantization={model.quantization!r} must be one of {choices}")
    if model.fp8_activations and model.quantization != "fp8":
        problems.append(
            "model.fp8_activations=true quantizes the activations of fp8 weights: "
            "it needs model.quantization=fp8"
        )
    if model.revision is not None and model.path is None:
        problems.append(f"model.revision={model.revision!r} picks a hub id's version: it needs model.path")
    if cache.dtype not in KV_CACHE_DTYPES:
        problems.append(f"cache.dtype={cache.dtype!r} must be {one_of(KV_CACHE_DTYPES)}")
    if cache.block_size < 1:
        problems.append(f"cache.block_size={cache.block_size} must be positive")
    if config.attention.backend not in (backends := ("auto", *BACKENDS)):
        problems.append(f"attention.backend={config.attention.backend!r} must be {one_of(backends)}")
    if config.attention.cascade not in CASCADE_MODES:
        problems.append(f"attention.cascade={config.attention.cascade!r} must be {one_of(CASCADE_MODES)}")
    if not 0 < cache.gpu_memory_utilization <= 1:
        problems.append(f"cache.gpu_memory_utilization={cache.gpu_memory_utilization} must be in (0, 1]")
    if cache.num_blocks is not None and cache.num_blocks < 1:
        problems.append(f"cache.num_blocks={cache.num_blocks} must be positive (or null: from memory)")
    if sched.max_num_seqs < 1 or sched.max_num_batched_tokens < 1 or sched.max_model_len < 1:
        problems.append("scheduler.max_num_seqs, max_num_batched_tokens and max_model_len must be positive")
    if sched.max_num_batched_tokens < 2:
        problems.append(
            f"scheduler.max_num_batched_tokens={sched.max_num_batched_tokens} must be at least 2: a prompt's "
            "chunks never leave a single token behind"
        )
    if sched.policy not in RANKS:
        problems.append(f"scheduler.policy={sched.policy!r} must be {one_of(RANKS)}")
    if sched.max_logprobs < -1:
        problems.append(f"scheduler.max_logprobs={sched.max_logprobs} must be -1 (no cap) or at least 0")
    if sched.num_decode_steps < 1:
        problems.append(f"scheduler.num_decode_steps={sched.num_decode_steps} must be at least 1")
    if sched.max_model_len > model.max_position_embeddings:
        problems.append(
            f"scheduler.max_model_len={sched.max_model_len} exceeds the model's "
            f"max_position_embeddings={model.max_position_embeddings}"
        )
    if not sched.chunked_prefill and sched.max_num_batched_tokens < sched.max_model_len:
        problems.append(
            f"scheduler.max_num_batched_tokens={sched.max_num_batched_tokens} < max_model_len="
            f"{sched.max_model_len}: without chunked_prefill a long prompt could never be scheduled"
        )
    if tp < 1 or model.num_attention_heads % tp or model.num_key_value_heads % tp:
        problems.append(
            f"parallel.tensor_parallel_size={tp} must divide num_attention_heads={model.num_attention_heads} "
            f"and num_key_value_heads={model.num_key_value_heads}"
        )
    if config.compile.sampler not in SAMPLER_COMPILE_MODES:
        problems.append(f"compile.sampler={config.compile.sampler!r} must be {one_of(SAMPLER_COMPILE_MODES)}")
    if (warm_up := config.compile.prefill_warm_up) not in PREFILL_WARM_UP_MODES:
        problems.append(f"compile.prefill_warm_up={warm_up!r} must be {one_of(PREFILL_WARM_UP_MODES)}")
    if (max_prefill_graph_tokens := config.compile.max_prefill_graph_tokens) < 0:
        problems.append(f"compile.max_prefill_graph_tokens={max_prefill_graph_tokens} must be 0 or more")
    profile = config.profile
    if profile.torch_trace_steps < 0 or profile.torch_trace_start_step < 0:
        problems.append("profile.torch_trace_steps and profile.torch_trace_start_step must be 0 or more")
    if profile.torch_trace_steps and not profile.enabled:
        problems.append(f"profile.torch_trace_steps={profile.torch_trace_steps} needs profile.enabled=true")
    if profile.live and not profile.enabled:
        problems.append("profile.live=true needs profile.enabled=true")
    if problems:
        raise ValueError("invalid config: " + "; ".join(problems))


def require_capability(device: str, minimum: tuple[int, int], setting: str, why: str) -> None:
    """A ValueError naming `setting` where `device`'s compute capability is below `minimum`."""
    capability = torch.cuda.get_device_capability(torch.device(device))
    if capability < minimum:
        raise ValueError(
            f"{setting} needs a GPU of compute capability {minimum[0]}.{minimum[1]} or later ({why}); "
            f"{device} has {capability[0]}.{capability[1]}"
        )


def resolve(config: EngineConfig) -> EngineConfig:
    """`config` validated, with every `auto` settled for this machine: the device (`cuda` when there is one),
    the attention backend (flash-attn where it can run), the dtype (bf16 on CUDA, fp32 on the CPU) and
    whether to compile the model and the sampler and to warm up prefill (on CUDA, the last two where the
    model is compiled). Resolving a resolved config changes nothing."""
    validate(config)
    device = config.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available on this machine")
    on_cuda = device.startswith("cuda")
    if on_cuda and config.model.quantization == "fp8":
        why = "its matmuls scale float8 per row and column"
        require_capability(device, (9, 0), "model.quantization=fp8", why)
    if on_cuda and config.cache.dtype == "fp8":
        require_capability(device, (8, 9), "cache.dtype=fp8", "its kernels convert float8 e4m3 in registers")
    backend = resolve_backend(config.attention.backend, device, config.cache.block_size)
    dtype = resolved_dtype(config.model.dtype, on_cuda)
    enabled = on_cuda if config.compile.enabled is None else config.compile.enabled
    sampler = config.compile.sampler
    if sampler == "auto":
        sampler = "on" if enabled and on_cuda else "off"
    return dataclasses.replace(
        config,
        device=device,
        model=dataclasses.replace(config.model, dtype=dtype),
        attention=dataclasses.replace(config.attention, backend=backend.name),
        compile=dataclasses.replace(
            config.compile,
            enabled=enabled,
            sampler=sampler,
            prefill_warm_up=resolved_prefill_warm_up(config.compile.prefill_warm_up, on_cuda, enabled),
        ),
    )
