"""Qwen2 and Qwen2.5: biases on the q, k and v projections (not on o), no q/k norms; the small sizes tie
their embeddings (their `config.json` says so)."""

from __future__ import annotations

from typing import Any

from nvllm.config import ModelConfig
from nvllm.models.decoder import DecoderForCausalLM, LayerShape
from nvllm.models.sliding_window import qwen_window


class Qwen2ForCausalLM(DecoderForCausalLM):
    hf_defaults = {"max_position_embeddings": 32768, "head_dim": None}

    @staticmethod
    def layer_shape(config: ModelConfig) -> LayerShape:
        return LayerShape(qkv_bias=True)  # transformers' Qwen2 has them whatever `attention_bias` says

    @staticmethod
    def unsupported_settings(hf: dict[str, Any]) -> list[str]:
        return qwen_window(hf)
