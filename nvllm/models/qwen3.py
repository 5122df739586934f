"""Qwen3 dense: an RMSNorm over each query and key head before RoPE; biases on the attention's
projections where `attention_bias` (none in Qwen3's published checkpoints)."""

from __future__ import annotations

from typing import Any

from nvllm.config import ModelConfig
from nvllm.models.decoder import DecoderForCausalLM, LayerShape
from nvllm.models.sliding_window import qwen_window


class Qwen3ForCausalLM(DecoderForCausalLM):
    hf_defaults = {"max_position_embeddings": 32768, "head_dim": 128}

    @staticmethod
    def layer_shape(config: ModelConfig) -> LayerShape:
        return LayerShape(qk_norm=True, qkv_bias=config.attention_bias, o_bias=config.attention_bias)

    @staticmethod
    def unsupported_settings(hf: dict[str, Any]) -> list[str]:
        return qwen_window(hf)
