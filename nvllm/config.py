"""The engine's configuration: one frozen dataclass per group, and the conversion of plain values into them.

The engine only sees a resolved `EngineConfig` (`nvllm.engine.config_resolution.resolve`: validated, with
`auto` settled once for this machine). Nothing here knows about the modules that read a config — models,
backends, experiments or Hydra — so that every one of them may import it.
"""

from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from dataclasses import dataclass, field
from typing import Any

QUANTIZATIONS = ("none", "fp8")  # ModelConfig.quantization's values


@dataclass(frozen=True)
class ModelConfig:
    """The architecture (HF `config.json` names) plus where its weights come from. The defaults are
    Qwen3-0.6B's published shape; `nvllm.models.presets` names the others."""

    name: str = "qwen3-0.6b"
    path: str | None = None  # HF checkpoint dir or hub id; None = seeded random weights of this architecture
    revision: str | None = None  # a hub id's branch, tag or commit (None: its main branch)
    dtype: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | bfloat16 | float16 | float32
    # none | fp8: the decoder layers' matmul weights stored in float8 (e4m3), each output channel with its
    # own scale, quantized from the checkpoint's weights as they load (nvllm.ops.fp8); the embedding and
    # the LM head stay in `dtype`. Never the default: it changes the model's outputs.
    quantization: str = "none"
    # fp8 weights (`quantization=fp8`) converted to bf16 inside the Triton matmuls (the skinny and MoE
    # grouped ones, on CUDA) by moving bits (nvllm.ops.e4m3_to_bf16) rather than by Triton's conversion,
    # which runs on the SM's conversion units at less than the memory's rate; false: Triton's conversion
    fp8_move_bits: bool = True
    # a mixture of experts' CUDA batches routed by Triton kernels inside `nvllm::routed_experts` (softmax,
    # top-k, and for small batches the sort by expert in the same kernel); off: routed in the compiled graph.
    # Off by default: level at a single stream now that the MoE kernels are chained (PDL), slower at batches
    # of 64 tokens and more, prefills most
    moe_routing_kernel: bool = False
    # fp8 weights (`quantization=fp8`) multiplying activations quantized to fp8 at every batch size, on the
    # fp8 tensor cores: a MoE's experts (the input a scale per token, the intermediate a scale per 64
    # columns; nvllm.ops.moe_fp8_triton) and dense batches of at most 16 rows (a scale per token, as larger
    # batches quantize theirs anyway); off: those multiply bf16 activations by the fp8 weights converted to
    # bf16. Off by default: it changes the model's outputs and has not yet been timed on a GPU
    fp8_activations: bool = False
    architecture: str = "Qwen3ForCausalLM"
    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 1000000.0
    # default | yarn | llama3 (then the rope_* fields below that the scaling reads; see nvllm.layers.rotary)
    rope_scaling: str = "default"
    rope_scaling_factor: float = 1.0
    rope_original_max_position_embeddings: int | None = None
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_attention_factor: float | None = None  # None: from the factor, as YaRN's paper suggests
    rope_truncate: bool = True
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths past original / low_freq_factor are interpolated
    rope_high_freq_factor: float = 4.0  # llama3: wavelengths below original / high_freq_factor are kept
    attention_bias: bool = False  # biases on the q, k, v and o projections (Llama's and Qwen3's key)
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 40960
    eos_token_id: int = 151645
    # more tokens that end a sequence as EOS does: a checkpoint whose config.json or generation_config.json
    # lists several (Llama 3.1 Instruct's end of turn beside its end of text)
    extra_eos_token_ids: list[int] | None = None
    # mixture of experts (Qwen3-MoE; 0 experts: dense): each sparse layer's MLP is `num_experts` gated MLPs
    # of `moe_intermediate_size`, `num_experts_per_tok` of them per token; a layer is sparse unless listed
    # in `mlp_only_layers` or off the `decoder_sparse_step` (nvllm.models.qwen3_moe.is_sparse_layer)
    num_experts: int = 0
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 768
    norm_topk_prob: bool = False  # renormalise the chosen experts' router probabilities to sum to 1
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] | None = None

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return (self.eos_token_id, *(self.extra_eos_token_ids or ()))


@dataclass(frozen=True)
class CacheConfig:
    block_size: int = 256  # tokens per KV block; flash_attn needs a multiple of 256
    gpu_memory_utilization: float = 0.9  # share of the GPU the weights, activations and KV cache may use
    num_blocks: int | None = None  # None: as many as the memory budget allows
    cpu_memory_gib: float = 2.0  # the KV budget on the CPU, where there is no device memory to measure
    enable_prefix_caching: bool = True
    dtype: str = "auto"  # what K and V are stored as: auto (the model's dtype) or fp8 (e4m3, a byte each)


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
    # While a stream wants each token as it is sampled (the server, `LLM.stream`), the engine hands a
    # round's tokens out step by step. Rounds are one step long while at most this many sequences run and
    # the waiting prompts have room, so that a prompt that arrives waits for no round to end; above it (the
    # host's work for every step of every row would then slow the steps) or with prompts waiting for room,
    # full rounds.
    one_step_rounds_max_seqs: int = 64
    # Admit the waiting requests that share a prompt prefix together (nvllm.engine.prefix_groups): one
    # request computes the prefix first and the others then find it in the prefix cache, and a group's
    # members run side by side, where cascade attention reads their prefix once per step. Reordering is
    # bounded: no request is overtaken by more than max_num_seqs later ones.
    group_prefixes: bool = True
    # A decode round's rows ordered by their sequences' lengths, longest first, rather than by arrival: the
    # decode attention kernel's programs start in row order, so the longest rows start first and the
    # shortest fill the last wave (experiments/results/2026-12-05-h200-decode-order.md). False: arrival.
    longest_first: bool = True
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
    # On CUDA, the sampler's race in Triton kernels that draw its noise as they read the logits, rather than
    # the torch race reading a tensor of noise drawn before it (batches with top-k/top-p or seeded rows
    # still race in torch)
    race_kernel: bool = True
    max_capture_batch_size: int = 512  # decode batches above this run the compiled graph without a CUDA graph
    # Prefill steps of up to this many tokens (of at most 4 sequences) replay CUDA graphs too, one per token
    # bucket (16, 32, ... up to this): a compiled prefill launched from Python costs far more host time
    # than its kernels take on the GPU (every kernel and op is launched from Python). 0: none.
    max_prefill_graph_tokens: int = 2048
    # Start-up runs a prefill step of each of a ladder of token counts, so that Triton compiles the kernels
    # a prefill's size picks then, not inside the first long prompts (`nvllm.runner.prefill_warm_up`; its
    # time counts as compile time): auto | on | off. auto: where the model is compiled on CUDA (the CPU
    # runs no Triton kernel)
    prefill_warm_up: str = "auto"
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
    # stream each step's record while the run goes: appended to the run dir's steps.csv, and a few points a
    # second to the job's wandb run (the experiment harness starts the stream; needs `enabled`)
    live: bool = False


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
