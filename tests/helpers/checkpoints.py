"""A seeded random Qwen3 checkpoint in Hugging Face's format, for parity tests against transformers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from experiments.harness.hf_checkpoint import write_random_checkpoint
from nvllm.models.presets import model_preset
from nvllm.tokenizer.tokenizer import Tokenizer, load_tokenizer


def save_with_transformers(tokenizer: Tokenizer, directory: Path) -> None:
    """The tokenizer's files as transformers writes a checkpoint's (tokenizer.json, tokenizer_config.json,
    chat_template.jinja)."""
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend, chat_template=tokenizer.chat_template, **tokenizer.special_tokens
    ).save_pretrained(str(directory))


def write_checkpoint(
    directory: Path, preset: str = "tiny", seed: int = 0, num_files: int = 1, **overrides
) -> Path:
    """config.json, the tokenizer and the weights (split over `num_files` shards with an index if > 1) of
    the preset with `overrides` (ModelConfig fields)."""
    model = dataclasses.replace(model_preset(preset), **overrides)
    write_random_checkpoint(directory, model, seed, num_files)
    save_with_transformers(load_tokenizer(None), directory)
    return directory
