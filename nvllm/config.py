"""Config schemas: one dataclass per Hydra config group, validated once here.

The engine only sees `EngineConfig` (a plain object): the Python API builds one without Hydra, and
`python -m nvllm.run` builds the same thing from the composed YAML (see `RunConfig`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

# Paged flash-attn reads the KV cache in tiles of 256 tokens: a block must hold whole tiles.
FLASH_ATTN_BLOCK_MULTIPLE = 256


@dataclass
class ModelConfig:
    """The architecture (HF `config.json` names) plus where its weights come from."""

    name: str = "qwen3-0.6b"
    path: str | None = None  # an HF checkpoint dir; None = seeded random weights of this architecture
    dtype: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | bfloat16 | float16 | float32
    architecture: str = "Qwen3ForCausalLM"
    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 40960
    eos_token_id: int = 151645


@dataclass
class CacheConfig:
    block_size: int = 256
    gpu_memory_utilization: float = 0.9
    num_blocks: int | None = None  # None: as many as the memory budget allows
    cpu_memory_gib: float = 2.0  # the KV budget on the CPU, where there is no device memory to measure
    enable_prefix_caching: bool = True


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 512
    max_num_batched_tokens: int = 16384
    max_model_len: int = 4096
    chunked_prefill: bool = True
    policy: str = "fcfs"
    # Decode steps per scheduling round: the model runs them back to back, each feeding its sampled tokens
    # to the next on the device, and the host reads the tokens once at the end. The host's per-step work
    # (scheduling, inputs, bookkeeping) then overlaps the GPU instead of idling it between steps; a
    # sequence that stops inside a round has its extra tokens discarded.
    num_decode_steps: int = 16
    # Launch the next decode round before the current one's tokens reach the host, as if no sequence stops
    # in it: the host's work between rounds (bookkeeping, scheduling, inputs) then runs while the GPU works.
    # A sequence that does stop (EOS) wastes its steps of the next round. Rounds that need the current
    # tokens on the host first (admitting a prompt, preempting) are not overlapped.
    overlap_rounds: bool = True


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1


@dataclass
class CompileConfig:
    # None: compile on CUDA, run eager on the CPU (where compiling a full-size model takes minutes)
    enabled: bool | None = None
    mode: str = "reduce-overhead"  # decode's (with cuda_graphs=inductor); prefill's is always "default"
    # Prefill compiled (the decode graph, unless that one is inductor's: then a second compile): a
    # 16,384-token step of Qwen3-0.6B takes 47 ms instead of 102 ms eager on the H200 (the eager one is
    # mostly elementwise kernels).
    compile_prefill: bool = True
    max_capture_batch_size: int = 512  # decode batches above this run the prefill-style graph
    # Who records decode's CUDA graphs: inductor (mode=reduce-overhead's graph trees) or manual (one
    # torch.cuda.CUDAGraph per batch size around the model compiled without graphs, replayed without dynamo)
    cuda_graphs: str = "manual"
    # Prefill steps of up to this many tokens (of at most 4 sequences) also replay manual CUDA graphs, one
    # per token bucket (16, 32, ... up to this): a compiled prefill launches its ~500 kernels from Python,
    # 36 ms for a 128-token prompt on the H200 host, which is the time to first token. 0: none.
    max_prefill_graph_tokens: int = 512


@dataclass
class AttentionConfig:
    backend: str = "auto"  # auto | flash_attn | torch


@dataclass
class EngineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int = 0


@dataclass
class WorkloadConfig:
    """The requests an experiment sends. Lengths are typed ints (so Hydra rejects a wrong type): a
    length is drawn uniformly from [min_*, *] when min_* is set, else it is exactly *."""

    num_seqs: int = 8
    input_len: int = 128  # random-token prompts only: text prompts have the length they have
    min_input_len: int | None = None
    output_len: int = 64
    min_output_len: int | None = None
    temperature: float = 0.6
    ignore_eos: bool = True
    seed: int = 0  # draws the prompt tokens and the lengths
    prompts: list[str] = field(default_factory=list)  # text, cycled to num_seqs; empty: random tokens


@dataclass
class WandbConfig:
    project: str = "nvllm"
    mode: str = "offline"  # online | offline | disabled; conf/config.yaml reads $WANDB_MODE
    group: str | None = None
    dir: str | None = None


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
    "attention_backend": "attention.backend",
    "dtype": "model.dtype",
    "device": "device",
    "seed": "seed",
}


def model_preset(name: str) -> ModelConfig:
    """The architecture named by `conf/model/<name>.yaml` (the same files Hydra composes)."""
    preset = CONF_DIR / "model" / f"{name}.yaml"
    if not preset.is_file():
        known = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
        raise ValueError(f"unknown model {name!r}: not a directory and not one of {known}")
    return to_dataclass(ModelConfig, OmegaConf.to_container(OmegaConf.load(preset), resolve=True))


def model_from_checkpoint(path: str, base: ModelConfig | None = None) -> ModelConfig:
    """Architecture fields read from the checkpoint's `config.json`; the rest kept from `base`."""
    path = os.path.expanduser(path)
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise ValueError(f"model.path={path!r} has no config.json")
    hf = json.loads(config_file.read_text())
    model = base or ModelConfig()
    values = {f.name: getattr(model, f.name) for f in fields(ModelConfig)}
    values.update({k: v for k, v in hf.items() if k in values and v is not None})
    values["architecture"] = (hf.get("architectures") or [model.architecture])[0]
    values["name"] = Path(path).name
    values["path"] = path
    if hf.get("head_dim") is None:
        values["head_dim"] = hf["hidden_size"] // hf["num_attention_heads"]
    eos = hf.get("eos_token_id")
    values["eos_token_id"] = (
        eos[0] if isinstance(eos, list) else (eos if eos is not None else model.eos_token_id)
    )
    return ModelConfig(**values)


def to_dataclass(cls: type, values: dict) -> Any:
    """Build a (nested) config dataclass from a plain dict, rejecting keys the schema does not have."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown config key(s) {unknown} for {cls.__name__}; known: {sorted(known)}")
    kwargs, defaults = {}, cls()
    for name, value in values.items():
        default = getattr(defaults, name)
        is_nested = hasattr(default, "__dataclass_fields__")
        kwargs[name] = to_dataclass(type(default), value) if is_nested and isinstance(value, dict) else value
    return cls(**kwargs)


def engine_config_from_kwargs(model: str | None = None, **overrides: Any) -> EngineConfig:
    """`LLM(model, **overrides)`: a checkpoint dir, a preset name or None (Qwen3-0.6B, random weights)."""
    config = EngineConfig()
    if model is not None and os.path.isdir(os.path.expanduser(model)):
        config.model = model_from_checkpoint(model)
    else:
        config.model = model_preset(model or config.model.name)
    for key, value in overrides.items():
        dotted = FLAT_KEYS.get(key, key.replace("__", "."))
        if key == "enforce_eager":
            value = not value
        group, _, leaf = dotted.rpartition(".")
        target = getattr(config, group) if group else config
        if (group and not hasattr(config, group)) or not hasattr(target, leaf):
            raise ValueError(f"unknown LLM argument {key!r}; known: {sorted(FLAT_KEYS)} or group__key")
        setattr(target, leaf, value)
    validate(config)
    return config


def engine_config_from_run_config(cfg: Any) -> EngineConfig:
    """The engine's part of a composed Hydra config (a DictConfig or the RunConfig dataclass)."""
    engine_keys = [f.name for f in fields(EngineConfig)]
    if not isinstance(cfg, dict):  # resolve the engine's keys only: the others may name Hydra's runtime
        node = OmegaConf.create(cfg)
        cfg = {
            key: OmegaConf.to_container(node[key], resolve=True)
            if OmegaConf.is_config(node[key])
            else node[key]
            for key in engine_keys
            if key in node
        }
    config = to_dataclass(EngineConfig, {k: v for k, v in cfg.items() if k in engine_keys})
    if config.model.path is not None:
        config.model = model_from_checkpoint(config.model.path, base=config.model)
    validate(config)
    return config


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available on this machine")
    return device


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
    if cache.block_size < 1:
        problems.append(f"cache.block_size={cache.block_size} must be positive")
    if config.attention.backend not in ("auto", "flash_attn", "torch"):
        problems.append(f"attention.backend={config.attention.backend!r} must be auto, flash_attn or torch")
    if config.attention.backend == "flash_attn" and cache.block_size % FLASH_ATTN_BLOCK_MULTIPLE:
        problems.append(
            f"cache.block_size={cache.block_size} cannot be served by the flash_attn backend: paged "
            f"flash-attn needs a multiple of {FLASH_ATTN_BLOCK_MULTIPLE}"
        )
    if not 0 < cache.gpu_memory_utilization <= 1:
        problems.append(f"cache.gpu_memory_utilization={cache.gpu_memory_utilization} must be in (0, 1]")
    if cache.num_blocks is not None and cache.num_blocks < 1:
        problems.append(f"cache.num_blocks={cache.num_blocks} must be positive (or null: from memory)")
    if sched.max_num_seqs < 1 or sched.max_num_batched_tokens < 1 or sched.max_model_len < 1:
        problems.append("scheduler.max_num_seqs, max_num_batched_tokens and max_model_len must be positive")
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
    if sched.policy != "fcfs":
        problems.append(f"scheduler.policy={sched.policy!r}: only 'fcfs' is implemented")
    if tp < 1 or model.num_attention_heads % tp or model.num_key_value_heads % tp:
        problems.append(
            f"parallel.tensor_parallel_size={tp} must divide num_attention_heads={model.num_attention_heads} "
            f"and num_key_value_heads={model.num_key_value_heads}"
        )
    if (max_prefill_graph_tokens := config.compile.max_prefill_graph_tokens) < 0:
        problems.append(f"compile.max_prefill_graph_tokens={max_prefill_graph_tokens} must be 0 or more")
    if config.compile.cuda_graphs not in ("inductor", "manual"):
        problems.append(f"compile.cuda_graphs={config.compile.cuda_graphs!r} must be inductor or manual")
    if config.compile.mode not in (
        "default",
        "reduce-overhead",
        "max-autotune",
        "max-autotune-no-cudagraphs",
    ):
        problems.append(f"compile.mode={config.compile.mode!r} is not a torch.compile mode")
    if problems:
        raise ValueError("invalid config: " + "; ".join(problems))


@dataclass
class RunnerConfig:
    """The experiment runner that `python -m nvllm.run` calls: `run(cfg, output_dir, name) -> metrics`."""

    _target_: str = "experiments.generate.run"


@dataclass
class RunConfig(EngineConfig):
    """A composed `python -m nvllm.run` config: the engine's groups plus the workload, wandb and runner."""

    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)


def validate_workload(workload: WorkloadConfig) -> None:
    """What the schema's types cannot say about a workload, as one clear ValueError."""
    problems = []
    if workload.num_seqs < 1:
        problems.append(f"workload.num_seqs={workload.num_seqs} must be positive")
    for kind in ("input", "output"):
        longest, shortest = getattr(workload, f"{kind}_len"), getattr(workload, f"min_{kind}_len")
        if longest < 1:
            problems.append(f"workload.{kind}_len={longest} must be positive")
        if shortest is not None and not 1 <= shortest <= longest:
            problems.append(f"workload.min_{kind}_len={shortest} must be in [1, {kind}_len={longest}]")
    if workload.temperature < 0:
        problems.append(f"workload.temperature={workload.temperature} must be >= 0 (0 means greedy)")
    if problems:
        raise ValueError("invalid workload: " + "; ".join(problems))


GROUP_SCHEMAS = {
    "model": ModelConfig,
    "cache": CacheConfig,
    "scheduler": SchedulerConfig,
    "parallel": ParallelConfig,
    "compile": CompileConfig,
    "attention": AttentionConfig,
    "workload": WorkloadConfig,
    "wandb": WandbConfig,
}


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore: `run_schema` types the whole composed config (a wrong key
    or type fails at composition, naming it) and `<group>/schema` is what each group's YAML extends.
    Hydra is imported here, not at module level, so that the Python API never needs it."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for group, schema in GROUP_SCHEMAS.items():
        store.store(group=group, name="schema", node=schema)
