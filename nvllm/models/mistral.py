"""Mistral: the shared decoder without biases, served where `sliding_window` is null (v0.2 on); a real sliding
window is refused (nvllm.models.sliding_window)."""

from __future__ import annotations

from typing import Any

from nvllm.models.decoder import DecoderForCausalLM
from nvllm.models.sliding_window import mistral_window


class MistralForCausalLM(DecoderForCausalLM):
    hf_defaults = {"max_position_embeddings": 131072, "head_dim": None}

    @staticmethod
    def unsupported_settings(hf: dict[str, Any]) -> list[str]:
        return mistral_window(hf)
