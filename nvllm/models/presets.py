"""The architectures `LLM(model=NAME)` and `model=NAME` (Hydra) build with random weights: Qwen3's published
shapes, and a tiny one for tests and CPU runs. Every field not named here is `ModelConfig`'s default."""

from __future__ import annotations

from nvllm.config import ModelConfig


def _qwen3(name: str, hidden: int, intermediate: int, layers: int, heads: int, tied: bool) -> ModelConfig:
    return ModelConfig(
        name=name,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=tied,
    )


PRESETS: dict[str, ModelConfig] = {
    "qwen3-0.6b": _qwen3("qwen3-0.6b", 1024, 3072, 28, 16, tied=True),
    "qwen3-1.7b": _qwen3("qwen3-1.7b", 2048, 6144, 28, 16, tied=True),
    "qwen3-4b": _qwen3("qwen3-4b", 2560, 9728, 36, 32, tied=True),
    "qwen3-8b": _qwen3("qwen3-8b", 4096, 12288, 36, 32, tied=False),
    "qwen3-14b": _qwen3("qwen3-14b", 5120, 17408, 40, 40, tied=False),
    "qwen3-32b": _qwen3("qwen3-32b", 5120, 25600, 64, 64, tied=False),
    # Qwen3's vocabulary (so text prompts work), 4 layers, heads that split over TP=2 and 4
    "tiny": ModelConfig(
        name="tiny",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        tie_word_embeddings=False,
    ),
}
DEFAULT_PRESET = "qwen3-0.6b"


def model_preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model {name!r}: not a directory and not one of {sorted(PRESETS)}")
    return PRESETS[name]
