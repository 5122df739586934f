"""The engine's configuration: one frozen dataclass per group, validated once, with `auto` settled once.

The engine only sees a resolved `EngineConfig` (`resolve`): the device, the attention backend, the dtype and
whether to compile are decided here for this machine, and nothing downstream decides them again. The Python
API builds one from keyword arguments (`engine_config`); the experiment harness builds the same thing from
its composed YAML. Nothing here knows about experiments or Hydra.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any

QUANTIZATIONS = ("none", "fp8")  # ModelConfig.quantization's values


@dataclass(frozen=True)
class ModelConfig:
    """The architecture (HF `config.json` names) plus where its weights come from. The defaults are
    Qwen3-0.6B's published shape; `nvllm.models.presets` names the others."""

    name: str = "qwen3-0.6b"
    path: str | None = None  # an HF checkpoint dir; None = seeded random weights of this architecture
    dtype: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | bfloat16 | float16 | float32
    # none | fp8: the decoder layers' matmul weights stored in float8 (e4m3), each output channel with its
    # own scale, quantized from the checkpoint's weights as they load (nvllm.ops.fp8); the embedding and
    # the LM head stay in `dtype`. Never the default: it changes the model's outputs.
    quantization: str = "none"
    architecture: str = "Qwen3ForCausalLM"
    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 1000000.0
    rope_scaling: str = "default"  # default | yarn (then the rope_* fields below; see nvllm.layers.rotary)
    rope_scaling_factor: float = 1.0
    rope_original_max_position_embeddings: int | None = None
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_attention_factor: float | None = None  # None: from the factor, as YaRN's paper suggests
    rope_truncate: bool = True
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 40960
    eos_token_id: int = 151645


@dataclass(frozen=True)
class CacheConfig:
    block_size: int = 256  # tokens per KV block; flash_attn needs a multiple of 256
    gpu_memory_utilization: float = 0.9  # share of the GPU the weights, activations and KV cache may use
    num_blocks: int | None = None  # None: as many as the memory budget allows
    cpu_memory_gib: float = 2.0  # the KV budget on the CPU, where there is no device memory to measure
    enable_prefix_caching: bool = True


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 512  # sequences in one batch
    max_num_batched_tokens: int = 16384  # tokens in one step (the batch budget)
    max_model_len: int = 4096  # prompt + output tokens of one sequence
    chunked_prefill: bool = True  # split long prompts over steps to fit the budget
    # Decode steps per scheduling round: the model runs them back to back, each feeding its sampled tokens
    # to the next on the device, and the host reads the tokens once at the end. The host's per-step work
    # then overlaps the GPU instead of idling it between steps; a sequence that stops inside a round has
    # its extra tokens discarded.
    num_decode_steps: int = 16
    # Launch the next decode round before the current one's tokens reach the host, as if no sequence stops
    # in it: the host's work between rounds then runs while the GPU works. A sequence that does stop (EOS)
    # wastes its steps of the next round. Rounds that need the current tokens on the host first (admitting
    # a prompt, preempting) are not overlapped.
    overlap_rounds: bool = True
    # Admit the waiting requests that share a prompt prefix together (nvllm.engine.prefix_groups): one
    # request computes the prefix first and the others then find it in the prefix cache, and a group's
    # members run side by side, where cascade attention reads their prefix once per step. Reordering is
    # bounded: no request is overtaken by more than max_num_seqs later ones.
    group_prefixes: bool = True
    # The order requests are served in: fcfs (by arrival) | priority (by each request's `priority`, lower
    # first, then arrival; a waiting request may preempt running ones of lower priority for KV blocks)
    policy: str = "fcfs"
    # The most log-probabilities a request may ask for per token (`SamplingParams.logprobs`; vLLM's name and
    # default): each costs host memory for every generated token. -1: no cap (up to the whole vocabulary).
    max_logprobs: int = 20


@dataclass(frozen=True)
class ParallelConfig:
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class CompileConfig:
    # torch.compile the model and replay CUDA graphs of it. None: on CUDA only (compiling a full-size model
    # on a CPU takes minutes)
    enabled: bool | None = None
    compile_prefill: bool = True  # prefill steps run the compiled graph too (else the eager model)
    # torch.compile the sampler's draw (rank 0's; compiled at start-up): auto | on | off. auto: where the
    # model is compiled on CUDA (on the CPU a compiled draw gains nothing and costs start-up time)
    sampler: str = "auto"
    max_capture_batch_size: int = 512  # decode batches above this run the compiled graph without a CUDA graph
    # Prefill steps of up to this many tokens (of at most 4 sequences) replay CUDA graphs too, one per token
    # bucket (16, 32, ... up to this): a compiled prefill launched from Python costs far more host time
    # than its kernels take on the GPU. 0: none.
    max_prefill_graph_tokens: int = 512
    # A file of inductor's portable cache artifacts: read before compiling when it exists, written after
    # start-up's compiles, so that a start-up with empty local inductor/Triton caches compiles warm from it
    cache_artifacts: str | None = None


@dataclass(frozen=True)
class AttentionConfig:
    backend: str = "auto"  # auto | flash_attn | torch
    # Decode sequences that share leading KV blocks read them once per step (nvllm.attention.cascade):
    # auto where the rule there says it pays, on for every group of two or more, off never.
    cascade: str = "auto"


@dataclass(frozen=True)
class ProfileConfig:
    # time every host stage and each step's device work, and keep a record of every step and request
    # (`llm.profiler`); off, the engine records nothing
    enabled: bool = False
    torch_trace_steps: int = 0  # engine steps recorded with torch.profiler (a Chrome trace); 0: none
    torch_trace_start_step: int = 0  # engine steps let pass first (counted from the start or a reset)


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int = 0  # the random weights and the sampling


# nano-vLLM's keyword names (and our own flat names) → dotted config keys, for `LLM(path, **overrides)`.
FLAT_KEYS = {
    "enforce_eager": "compile.enabled",
    "tensor_parallel_size": "parallel.tensor_parallel_size",
    "kvcache_block_size": "cache.block_size",
    "num_kvcache_blocks": "cache.num_blocks",
    "gpu_memory_utilization": "cache.gpu_memory_utilization",
    "enable_prefix_caching": "cache.enable_prefix_caching",
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
    "device": "device",
    "seed": "seed",
}


def model_preset(name: str) -> ModelConfig:
    from nvllm.models.presets import PRESETS  # the presets are ModelConfigs: imported once this module is

    if name not in PRESETS:
        raise ValueError(f"unknown model {name!r}: not a directory and not one of {sorted(PRESETS)}")
    return PRESETS[name]


def checked_value(key: str, value: Any, hint: Any) -> Any:
    """`value` for a key typed `hint` (int, float, bool, str, or one of them | None), as that type: ints
    take Python and NumPy integers but not bools, floats any real number but a bool, bools only bools.
    Anything else is a ValueError naming the key."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if value is None and type(None) in options:
        return None
    if int in options and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if float in options and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if bool in options and isinstance(value, bool) or str in options and isinstance(value, str):
        return value
    if any(typing.get_origin(option) is list for option in options) and isinstance(value, (list, tuple)):
        return list(value)
    names = " or ".join(
        "None" if option is type(None) else getattr(option, "__name__", str(option)) for option in options
    )
    raise ValueError(f"{key}={value!r} must be {names}, not {type(value).__name__}")


def to_dataclass(cls: type, values: dict, base: Any = None, prefix: str = "") -> Any:
    """A (nested) config dataclass from a plain dict over `base` (default: the schema's defaults), rejecting
    keys the schema does not have and values of another type."""
    base = cls() if base is None else base
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown} for {cls.__name__}; known: {sorted(hints)}")
    changes = {}
    for name, value in values.items():
        current = getattr(base, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ValueError(f"{prefix}{name} is a group of keys, not a value ({value!r})")
            changes[name] = to_dataclass(type(current), value, current, f"{prefix}{name}.")
        elif isinstance(value, dict):
            raise ValueError(f"{prefix}{name} is a value, not a group of keys")
        else:
            changes[name] = checked_value(f"{prefix}{name}", value, hints[name])
    return dataclasses.replace(base, **changes)


def engine_config(model: str | None = None, **overrides: Any) -> EngineConfig:
    """`LLM(model, **overrides)`: a checkpoint dir, a preset name or None (Qwen3-0.6B, random weights);
    overrides by nano-vLLM's flat names or as `group__key`. Validated and resolved."""
    if model is not None and not isinstance(model, str | os.PathLike):
        raise ValueError(f"model={model!r} must be a checkpoint directory, a preset name or None")
    model = os.fspath(model) if model is not None else None
    from nvllm.models.hf_config import model_from_checkpoint  # reads ModelConfig: imported once this is

    if model is not None and os.path.isdir(os.path.expanduser(model)):
        model_config = model_from_checkpoint(model)
    elif model is not None and (os.sep in model or model.startswith((".", "~"))):
        raise ValueError(f"model={model!r}: no such checkpoint directory (a preset is a bare name)")
    else:
        model_config = model_preset(model or ModelConfig.name)
    nested: dict[str, Any] = {}
    defaults = EngineConfig()
    for key, value in overrides.items():
        dotted = FLAT_KEYS.get(key, key.replace("__", "."))
        if key == "enforce_eager":
            value = not checked_value(key, value, bool)
        group, _, leaf = dotted.rpartition(".")
        schema = getattr(defaults, group, None) if group else defaults
        if not dataclasses.is_dataclass(schema) or leaf not in {f.name for f in fields(schema)}:
            raise ValueError(f"unknown LLM argument {key!r}; known: {sorted(FLAT_KEYS)} or group__key")
        target = nested.setdefault(group, {}) if group else nested
        target[leaf] = value
    config = to_dataclass(EngineConfig, nested, EngineConfig(model=model_config))
    return resolve(config)


def engine_config_from_dict(values: dict) -> EngineConfig:
    """An engine config from nested plain values (the engine's groups of a composed experiment config);
    `model.path` set: the checkpoint's architecture over the rest. Validated and resolved."""
    from nvllm.models.hf_config import model_from_checkpoint

    config = to_dataclass(EngineConfig, values)
    if config.model.path is not None:
        config = dataclasses.replace(config, model=model_from_checkpoint(config.model.path, config.model))
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
    if model.dtype not in ("auto", "bfloat16", "float16", "float32"):
        problems.append(f"model.dtype={model.dtype!r} must be auto, bfloat16, float16 or float32")
    if model.quantization not in QUANTIZATIONS:
        choices = ", ".join(QUANTIZATIONS)
        problems.append(f"model.quantization={model.quantization!r} must be one of {choices}")
    if cache.block_size < 1:
        problems.append(f"cache.block_size={cache.block_size} must be positive")
    if config.attention.backend not in ("auto", "flash_attn", "torch"):
        problems.append(f"attention.backend={config.attention.backend!r} must be auto, flash_attn or torch")
    if config.attention.cascade not in ("auto", "on", "off"):
        problems.append(f"attention.cascade={config.attention.cascade!r} must be auto, on or off")
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
    if sched.policy not in ("fcfs", "priority"):
        problems.append(f"scheduler.policy={sched.policy!r} must be fcfs or priority")
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
    if config.compile.sampler not in ("auto", "on", "off"):
        problems.append(f"compile.sampler={config.compile.sampler!r} must be auto, on or off")
    if (max_prefill_graph_tokens := config.compile.max_prefill_graph_tokens) < 0:
        problems.append(f"compile.max_prefill_graph_tokens={max_prefill_graph_tokens} must be 0 or more")
    profile = config.profile
    if profile.torch_trace_steps < 0 or profile.torch_trace_start_step < 0:
        problems.append("profile.torch_trace_steps and profile.torch_trace_start_step must be 0 or more")
    if profile.torch_trace_steps and not profile.enabled:
        problems.append(f"profile.torch_trace_steps={profile.torch_trace_steps} needs profile.enabled=true")
    if problems:
        raise ValueError("invalid config: " + "; ".join(problems))


def resolve(config: EngineConfig) -> EngineConfig:
    """`config` validated, with every `auto` settled for this machine: the device (`cuda` when there is one),
    the attention backend (flash-attn where it can run), the dtype (bf16 on CUDA, fp32 on the CPU) and
    whether to compile the model and the sampler (on CUDA). Resolving a resolved config changes nothing."""
    import torch

    from nvllm.attention import resolve_backend

    validate(config)
    device = config.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available on this machine")
    on_cuda = device.startswith("cuda")
    if on_cuda and config.model.quantization == "fp8":
        capability = torch.cuda.get_device_capability(torch.device(device))
        if capability < (9, 0):
            raise ValueError(
                f"model.quantization=fp8 needs a GPU of compute capability 9.0 or later (its matmuls scale "
                f"float8 per row and per column); {device} has {capability[0]}.{capability[1]}"
            )
    backend = resolve_backend(config.attention.backend, device, config.cache.block_size)
    dtype = config.model.dtype
    if dtype == "auto":
        dtype = "bfloat16" if on_cuda else "float32"
    enabled = on_cuda if config.compile.enabled is None else config.compile.enabled
    sampler = config.compile.sampler
    if sampler == "auto":
        sampler = "on" if enabled and on_cuda else "off"
    return dataclasses.replace(
        config,
        device=device,
        model=dataclasses.replace(config.model, dtype=dtype),
        attention=dataclasses.replace(config.attention, backend=backend.name),
        compile=dataclasses.replace(config.compile, enabled=enabled, sampler=sampler),
    )
