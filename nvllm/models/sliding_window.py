"""Sliding-window attention, which the engine does not implement: whether a checkpoint's `config.json` really
asks for it, each family marking it its own way, so that such a model is refused by name instead of served
as a different one. A window no sequence can reach (as long as the model's context) changes nothing."""

from __future__ import annotations

from typing import Any

QWEN_MAX_WINDOW_LAYERS = 28  # transformers' default: layers from this one on use the window


def qwen_window(hf: dict[str, Any]) -> list[str]:
    """Qwen2 and Qwen3: `use_sliding_window` puts the layers from `max_window_layers` on behind the window
    (where `layer_types` is not given; given, it says each layer's kind and is checked by itself)."""
    if not hf.get("use_sliding_window") or hf.get("layer_types") is not None:
        return []
    first = hf.get("max_window_layers", QWEN_MAX_WINDOW_LAYERS)
    if first >= hf["num_hidden_layers"] or not _window_reached(hf):
        return []
    return [f"use_sliding_window=true (a window of {hf.get('sliding_window')} tokens from layer {first} on)"]


MISTRAL_DEFAULT_WINDOW = 4096  # transformers' MistralConfig: a config.json without the key has this window


def mistral_window(hf: dict[str, Any]) -> list[str]:
    """Mistral: every layer behind `sliding_window` unless it is null."""
    if not _window_reached({"sliding_window": MISTRAL_DEFAULT_WINDOW, **hf}):
        return []
    window = hf.get("sliding_window", MISTRAL_DEFAULT_WINDOW)
    return [f"sliding_window={window} (only full attention: a checkpoint with sliding_window null is served)"]


def _window_reached(hf: dict[str, Any]) -> bool:
    window, context = hf.get("sliding_window"), hf.get("max_position_embeddings")
    return window is not None and (context is None or window < context)
