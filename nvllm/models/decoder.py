"""The dense decoder the families share (Qwen3, Qwen2, Llama, Mistral): attention through the paged custom
ops, a SwiGLU MLP, RMSNorm, rotary embeddings. What the families' layers differ in is a `LayerShape`; a
family is a subclass of `DecoderForCausalLM` that says its shape and how its `config.json` reads
(`nvllm.models.registry`).

No Python branching on data inside `forward`: each decoder layer compiles as one graph (fullgraph=True), and
every layer runs the same code on tensors of the same shapes, so that one compilation serves them all (see
`DecoderForCausalLM.compile_regions`; a family whose layers have two kinds of MLP, `make_mlp`, compiles one
graph per kind)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from nvllm.config import ModelConfig
from nvllm.distributed.group import tp_size
from nvllm.layers.attention import Attention, AttentionMetadata
from nvllm.layers.embed_head import ParallelLMHead, VocabParallelEmbedding
from nvllm.layers.fused_moe import FusedMoE
from nvllm.layers.linear import GateUpSiluParallelLinear, QKVParallelLinear, RowParallelLinear
from nvllm.layers.norm import RMSNorm
from nvllm.layers.rotary import RotaryEmbedding


@dataclass(frozen=True)
class LayerShape:
    """What a family's decoder layer has beyond the shared one."""

    qk_norm: bool = False  # an RMSNorm over each query and key head before RoPE (Qwen3)
    qkv_bias: bool = False  # biases on the q, k and v projections
    o_bias: bool = False  # a bias on the output projection


class DecoderAttention(nn.Module):
    def __init__(self, config: ModelConfig, shape: LayerShape):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            config.head_dim,
            config.num_attention_heads,
            config.num_key_value_heads,
            bias=shape.qkv_bias,
            quantization=config.quantization,
            fp8_activations=config.fp8_activations,
        )
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * config.head_dim,
            config.hidden_size,
            bias=shape.o_bias,
            quantization=config.quantization,
            fp8_activations=config.fp8_activations,
        )
        self.q_norm = self.k_norm = None
        if shape.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)
        self.attn = Attention(
            config.num_attention_heads // tp_size(),
            config.num_key_value_heads // tp_size(),
            config.head_dim,
            config.head_dim**-0.5,
        )

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, meta: AttentionMetadata):
        qkv = self.qkv_proj(hidden_states)
        attended = self.attn(qkv, positions, meta, self.q_norm, self.k_norm, self.rotary_emb)
        return self.o_proj(attended.flatten(1))


class GatedMLP(nn.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        quantized = dict(quantization=config.quantization, fp8_activations=config.fp8_activations)
        self.gate_up_proj = GateUpSiluParallelLinear(
            config.hidden_size, config.intermediate_size, **quantized
        )
        self.down_proj = RowParallelLinear(config.intermediate_size, config.hidden_size, **quantized)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gate_up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, shape: LayerShape, mlp: nn.Module):
        super().__init__()
        self.self_attn = DecoderAttention(config, shape)
        self.mlp = mlp
        self.mlp_routes_tokens = isinstance(mlp, FusedMoE)  # it is told the step's padding tokens
        # fp8 matmuls quantize their activations: the norms before them leave that to inductor to fuse. A
        # mixture of experts' input goes to the bf16 router and to the experts' op, which quantizes inside:
        # nothing to fuse after its norm
        fp8 = config.quantization == "fp8"
        eps, small_batches_quantize = config.rms_norm_eps, config.fp8_activations
        self.input_layernorm = RMSNorm(config.hidden_size, eps, fp8, small_batches_quantize)
        self.post_attention_layernorm = RMSNorm(
            config.hidden_size, eps, fp8 and not self.mlp_routes_tokens, small_batches_quantize
        )

    def forward(self, positions, hidden_states, residual, meta: AttentionMetadata):
        hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states, meta)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        if self.mlp_routes_tokens:
            return self.mlp(hidden_states, padding=meta.slot_mapping < 0), residual
        return self.mlp(hidden_states), residual


class DecoderModel(nn.Module):
    def __init__(
        self, config: ModelConfig, shape: LayerShape, make_mlp: Callable[[ModelConfig, int], nn.Module]
    ):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [DecoderLayer(config, shape, make_mlp(config, i)) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids, positions, meta: AttentionMetadata) -> torch.Tensor:
        # the first layer adds a zero residual, exactly: every layer then takes the same inputs (one compiled
        # graph for all of them, where a first layer without a residual would be a graph of its own)
        hidden_states = self.embed_tokens(input_ids)
        residual = torch.zeros_like(hidden_states)
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, meta)
        return self.norm(hidden_states, residual)[0]


class DecoderForCausalLM(nn.Module):
    """A dense decoder family. Subclasses set how their checkpoint's `config.json` reads and what their layers
    have (`layer_shape`); the registry keys them by the name `config.json`'s `architectures` gives."""

    # transformers' values of the config keys a checkpoint may leave out, where they differ from the
    # shared ones (nvllm.models.hf_config.COMMON_DEFAULTS); "head_dim": None derives hidden / heads
    hf_defaults: ClassVar[dict[str, Any]] = {}
    # config.json key → the key it stands for (transformers 5 writes Qwen3-MoE's num_experts as
    # num_local_experts)
    hf_aliases: ClassVar[dict[str, str]] = {}

    # checkpoint name fragment → (our packed parameter, which part of it)
    packed_modules = {
        "q_proj": ("qkv_proj", "q"),
        "k_proj": ("qkv_proj", "k"),
        "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    @staticmethod
    def layer_shape(config: ModelConfig) -> LayerShape:
        return LayerShape()

    @staticmethod
    def make_mlp(config: ModelConfig, layer_index: int) -> nn.Module:
        """The MLP of layer `layer_index` (a sparse family's differ by layer)."""
        return GatedMLP(config)

    @staticmethod
    def mlp_shapes(config: ModelConfig, layer_index: int) -> dict[str, tuple[int, ...]]:
        """transformers' parameter names (under `model.layers.{layer_index}.mlp.`) and shapes of that MLP."""
        hidden, intermediate = config.hidden_size, config.intermediate_size
        return {
            "gate_proj.weight": (intermediate, hidden),
            "up_proj.weight": (intermediate, hidden),
            "down_proj.weight": (hidden, intermediate),
        }

    @staticmethod
    def unsupported_settings(hf: dict[str, Any]) -> list[str]:
        """Settings of this family's `config.json` that change the model in ways the engine does not
        implement, each named (the settings every family refuses are nvllm.models.hf_config's)."""
        return []

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.model = DecoderModel(config, self.layer_shape(config), self.make_mlp)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def compile_regions(self) -> list[nn.Module]:
        """The modules `torch.compile` compiles one by one (regional compilation): the decoder layers, whose
        graph is traced and compiled once and reused by every layer, and the final norm. The embedding and
        the LM head are a kernel each and run as they are."""
        return [*self.model.layers, self.model.norm]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        logits_indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of the tokens at `logits_indices` (each sequence's last one), or of every token."""
        hidden_states = self.model(input_ids, positions, meta)
        if logits_indices is not None:
            hidden_states = hidden_states[logits_indices]
        return self.lm_head(hidden_states)
