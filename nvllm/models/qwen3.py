"""Qwen3 dense decoder. No Python branching on data inside `forward`: each decoder layer compiles as one graph
(fullgraph=True), and every layer runs the same code on tensors of the same shapes, so that one compilation
serves them all (see `Qwen3ForCausalLM.compile_regions`)."""

from __future__ import annotations

import torch
from torch import nn

from nvllm.config import ModelConfig
from nvllm.distributed.group import tp_size
from nvllm.layers.attention import Attention, AttentionMetadata
from nvllm.layers.embed_head import ParallelLMHead, VocabParallelEmbedding
from nvllm.layers.linear import GateUpSiluParallelLinear, QKVParallelLinear, RowParallelLinear
from nvllm.layers.norm import RMSNorm
from nvllm.layers.rotary import RotaryEmbedding


class Qwen3Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads // tp_size()
        self.num_kv_heads = config.num_key_value_heads // tp_size()
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            config.head_dim,
            config.num_attention_heads,
            config.num_key_value_heads,
            quantization=config.quantization,
        )
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * config.head_dim, config.hidden_size, quantization=config.quantization
        )
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)
        self.attn = Attention(self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, meta: AttentionMetadata):
        qkv = self.qkv_proj(hidden_states)
        attended = self.attn(qkv, positions, meta, self.q_norm, self.k_norm, self.rotary_emb)
        return self.o_proj(attended.flatten(1))


class Qwen3MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_up_proj = GateUpSiluParallelLinear(
            config.hidden_size, config.intermediate_size, config.quantization
        )
        self.down_proj = RowParallelLinear(
            config.intermediate_size, config.hidden_size, quantization=config.quantization
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gate_up_proj(x))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attn = Qwen3Attention(config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, positions, hidden_states, residual, meta: AttentionMetadata):
        hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states, meta)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual


class Qwen3Model(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([Qwen3DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids, positions, meta: AttentionMetadata) -> torch.Tensor:
        # the first layer adds a zero residual, exactly: every layer then takes the same inputs (one compiled
        # graph for all of them, where a first layer without a residual would be a graph of its own)
        hidden_states = self.embed_tokens(input_ids)
        residual = torch.zeros_like(hidden_states)
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual, meta)
        return self.norm(hidden_states, residual)[0]


class Qwen3ForCausalLM(nn.Module):
    # checkpoint name fragment → (our packed parameter, which part of it)
    packed_modules = {
        "q_proj": ("qkv_proj", "q"),
        "k_proj": ("qkv_proj", "k"),
        "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.model = Qwen3Model(config)
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
