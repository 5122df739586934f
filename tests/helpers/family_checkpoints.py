"""Tiny random checkpoints of each dense family, written by transformers itself (its config class, its model,
`save_pretrained`), so that reading them tests our config reader and weight names against the real thing.

Weights are redrawn after transformers' init with the spread of the engine's random weights
(`nvllm.models.weights.fill_random`), which keeps a random model's greedy path dependent on its context."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from nvllm.models.weights import fill_random
from nvllm.tokenizer.tokenizer import load_tokenizer
from tests.helpers.checkpoints import save_with_transformers

SHARED = dict(
    vocab_size=151936,  # the built-in tokenizer's, which the checkpoints carry
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=8,
    max_position_embeddings=512,
    eos_token_id=151645,
)
# family → (transformers' classes, config keys beyond SHARED): between them, every setting the families
# differ in (head_dim given or derived, biases, tied embeddings, RoPE scaling, sliding-window keys)
FAMILIES = {
    "llama3": (
        LlamaConfig,
        LlamaForCausalLM,
        dict(
            num_key_value_heads=4,
            head_dim=32,
            attention_bias=True,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
    ),
    "llama2": (LlamaConfig, LlamaForCausalLM, dict(num_key_value_heads=8, tie_word_embeddings=True)),
    "qwen2": (
        Qwen2Config,
        Qwen2ForCausalLM,
        dict(
            num_key_value_heads=4,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
            use_sliding_window=False,
            sliding_window=4096,
            max_window_layers=2,
        ),
    ),
    "mistral": (
        MistralConfig,
        MistralForCausalLM,
        dict(num_key_value_heads=2, head_dim=32, sliding_window=None, rope_theta=1000000.0),
    ),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(num_key_value_heads=4, head_dim=32)),
    # 8 experts, top-2, renormalised; layer 1 dense (mlp_only_layers), layers 0 and 2 sparse
    "qwen3_moe": (
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
        dict(
            num_key_value_heads=4,
            head_dim=32,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            moe_intermediate_size=64,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
        ),
    ),
}


def redraw(model: torch.nn.Module, seed: int, hidden_size: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            fill_random(param, name, hidden_size, generator)


def write_family_checkpoint(directory: Path, family: str, seed: int = 0, **overrides) -> Path:
    """A tiny random `family` checkpoint (FAMILIES' settings with `overrides`, config.json keys) in
    `directory`, with the built-in tokenizer's files."""
    config_class, model_class, settings = FAMILIES[family]
    config = config_class(**{**SHARED, **settings, **overrides})
    model = model_class(config).eval()
    redraw(model, seed, config.hidden_size)
    model.save_pretrained(str(directory))
    save_with_transformers(load_tokenizer(None), directory)
    return directory


def load_family_model(directory: Path) -> torch.nn.Module:
    """transformers' model of the checkpoint in `directory`, in fp32: the oracle."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
