"""The architectures `LLM(model=NAME)` and `model=NAME` (Hydra) build with random weights: the published
shapes of Qwen3 (dense and MoE), Qwen2.5, Llama 3.x and Mistral, and a tiny one for tests and CPU runs.
Every field not named here is `ModelConfig`'s default (Qwen3-0.6B's).

A preset has no tokenizer of its own: every preset uses the built-in one (Qwen3's). Its vocabulary is
Qwen's, so a text prompt for a preset with a smaller vocabulary (Llama's 128,256, Mistral's 32,768) may
hold token ids the model does not have, which the engine refuses by name; token-id prompts (the benchmarks')
work with every preset."""

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


def _llama3(name: str, hidden: int, layers: int, heads: int, head_dim: int, tied: bool, **rope):
    """Llama 3.x: 8 KV heads, Llama 3's vocabulary and RoPE scaled for a 128K context."""
    return ModelConfig(
        name=name,
        architecture="LlamaForCausalLM",
        vocab_size=128256,
        hidden_size=hidden,
        intermediate_size=14336 if hidden == 4096 else 8192,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=head_dim,
        tie_word_embeddings=tied,
        rope_theta=500000.0,
        rope_scaling="llama3",
        rope_original_max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        eos_token_id=128001,
        **rope,
    )


def _qwen25(name: str, vocab: int, hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int):
    return ModelConfig(
        name=name,
        architecture="Qwen2ForCausalLM",
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        tie_word_embeddings=vocab == 151936,  # the small sizes tie theirs
        max_position_embeddings=32768,
        eos_token_id=151643,
    )


def _qwen3_moe(name: str, hidden: int, intermediate: int, expert_intermediate: int, layers: int, heads: int):
    """Qwen3-MoE: 128 experts, 8 a token, renormalised; every layer sparse; Qwen3's attention (4 KV heads)."""
    return ModelConfig(
        name=name,
        architecture="Qwen3MoeForCausalLM",
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=4,
        head_dim=128,
        tie_word_embeddings=False,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=expert_intermediate,
        norm_topk_prob=True,
    )


PRESETS: dict[str, ModelConfig] = {
    "qwen3-0.6b": _qwen3("qwen3-0.6b", 1024, 3072, 28, 16, tied=True),
    "qwen3-1.7b": _qwen3("qwen3-1.7b", 2048, 6144, 28, 16, tied=True),
    "qwen3-4b": _qwen3("qwen3-4b", 2560, 9728, 36, 32, tied=True),
    "qwen3-8b": _qwen3("qwen3-8b", 4096, 12288, 36, 32, tied=False),
    "qwen3-14b": _qwen3("qwen3-14b", 5120, 17408, 40, 40, tied=False),
    "qwen3-32b": _qwen3("qwen3-32b", 5120, 25600, 64, 64, tied=False),
    "qwen3-30b-a3b": _qwen3_moe("qwen3-30b-a3b", 2048, 6144, 768, 48, 32),
    "qwen3-235b-a22b": _qwen3_moe("qwen3-235b-a22b", 4096, 12288, 1536, 94, 64),
    "qwen2.5-0.5b": _qwen25("qwen2.5-0.5b", 151936, 896, 4864, 24, 14, 2),
    "qwen2.5-7b": _qwen25("qwen2.5-7b", 152064, 3584, 18944, 28, 28, 4),
    "llama-3.1-8b": _llama3("llama-3.1-8b", 4096, 32, 32, 128, tied=False, rope_scaling_factor=8.0),
    "llama-3.2-1b": _llama3("llama-3.2-1b", 2048, 16, 32, 64, tied=True, rope_scaling_factor=32.0),
    "llama-3.2-3b": _llama3("llama-3.2-3b", 3072, 28, 24, 128, tied=True, rope_scaling_factor=32.0),
    "mistral-7b-v0.3": ModelConfig(
        name="mistral-7b-v0.3",
        architecture="MistralForCausalLM",
        vocab_size=32768,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        max_position_embeddings=32768,
        eos_token_id=2,
    ),
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
