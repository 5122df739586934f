"""A seeded random Qwen3 checkpoint in Hugging Face's format, for parity tests against transformers."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from pathlib import Path

from safetensors.torch import save_file
from transformers import PreTrainedTokenizerFast

from nvllm.config import ModelConfig
from nvllm.models.presets import model_preset
from nvllm.models.weights import random_tensors
from nvllm.tokenizer.tokenizer import Tokenizer, load_tokenizer


def hf_config(model: ModelConfig) -> dict:
    fields = {key: value for key, value in asdict(model).items() if not key.startswith("rope_")}
    for ours in ("name", "path", "dtype", "quantization", "architecture"):
        fields.pop(ours)
    return {
        "rope_theta": model.rope_theta,
        **fields,
        "architectures": [model.architecture],
        "model_type": "qwen3",
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "float32",
        "bos_token_id": 151643,
    }


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
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_config(model), indent=2))
    save_with_transformers(load_tokenizer(None), directory)
    tensors = {name: t.contiguous() for name, t, _ in random_tensors(model, seed)}
    names = list(tensors)
    shards = [names[i::num_files] for i in range(num_files)]
    if num_files == 1:
        save_file(tensors, str(directory / "model.safetensors"))
        return directory
    weight_map = {}
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{num_files:05d}.safetensors"
        save_file({n: tensors[n] for n in shard}, str(directory / file))
        weight_map.update(dict.fromkeys(shard, file))
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    return directory
