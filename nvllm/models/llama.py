"""Llama 2 and 3.x: the shared decoder as it is, biases on q, k, v and o where `attention_bias`; Llama 3.1's
RoPE scaling (`rope_type: llama3`) is nvllm.layers.rotary's."""

from __future__ import annotations

from typing import Any

from nvllm.config import ModelConfig
from nvllm.models.decoder import DecoderForCausalLM, LayerShape


class LlamaForCausalLM(DecoderForCausalLM):
    hf_defaults = {"max_position_embeddings": 2048, "head_dim": None}

    @staticmethod
    def layer_shape(config: ModelConfig) -> LayerShape:
        return LayerShape(qkv_bias=config.attention_bias, o_bias=config.attention_bias)

    @staticmethod
    def unsupported_settings(hf: dict[str, Any]) -> list[str]:
        return ["mlp_bias=true (the MLP's projections have no bias)"] if hf.get("mlp_bias") else []
