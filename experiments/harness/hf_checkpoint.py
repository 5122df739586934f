"""A model config and its tensors written as a Hugging Face checkpoint (config.json and safetensors), so
that transformers loads the very weights the engine runs: the engine's seeded random weights of a preset,
for a parity check against transformers (the validate experiment, the tests' oracles)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file

from nvllm.config import ModelConfig
from nvllm.models.hf_config import ROPE_KEYS
from nvllm.models.weights import random_tensors

# ModelConfig's fields that say where and how the engine runs the model: no part of its config.json
ENGINE_FIELDS = (
    "name",
    "path",
    "revision",
    "dtype",
    "quantization",
    "fp8_move_bits",
    "moe_routing_kernel",
    "fp8_activations",
    "architecture",
)


def rope_parameters(model: ModelConfig) -> dict:
    """transformers 5's `rope_parameters` of `model` (ModelConfig names the factor `rope_scaling_factor`)."""
    fields = asdict(model) | {"rope_factor": model.rope_scaling_factor}
    parameters = {"rope_type": model.rope_scaling, "rope_theta": model.rope_theta}
    for key in sorted(ROPE_KEYS[model.rope_scaling]):  # the keys nvllm.models.hf_config reads back
        if fields[f"rope_{key}"] is not None:
            parameters[key] = fields[f"rope_{key}"]
    return parameters


def hf_config(model: ModelConfig) -> dict:
    """`model`'s config.json. transformers' model_type is the architecture's class name without
    `ForCausalLM`, lower-cased (qwen3, llama, qwen2, mistral)."""
    fields = {key: value for key, value in asdict(model).items() if not key.startswith("rope_")}
    for ours in (*ENGINE_FIELDS, "extra_eos_token_ids"):
        fields.pop(ours)
    eos = list(model.eos_token_ids)
    return {
        # what the engine implements for every family, unless the config says otherwise (a field of its own)
        "hidden_act": "silu",
        "torch_dtype": "float32",
        "bos_token_id": 151643,
        "sliding_window": None,  # full attention (Mistral's config takes a window where the key is absent)
        **fields,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        # transformers 4's top-level theta where there is no scaling (either transformers reads it)
        **({"rope_parameters": rope_parameters(model)} if model.rope_scaling != "default" else {}),
        "rope_theta": model.rope_theta,
        "architectures": [model.architecture],
        "model_type": model.architecture.removesuffix("ForCausalLM").lower(),
    }


def write_weights(directory: Path, tensors: dict[str, torch.Tensor], num_files: int = 1) -> None:
    """`tensors` as safetensors in `directory`: one file, or `num_files` shards and their index."""
    if num_files == 1:
        save_file(tensors, str(directory / "model.safetensors"))
        return
    names = list(tensors)
    weight_map = {}
    for i in range(num_files):
        shard = names[i::num_files]
        file = f"model-{i + 1:05d}-of-{num_files:05d}.safetensors"
        save_file({name: tensors[name] for name in shard}, str(directory / file))
        weight_map.update(dict.fromkeys(shard, file))
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def write_random_checkpoint(directory: Path, model: ModelConfig, seed: int, num_files: int = 1) -> Path:
    """config.json and the weights the engine draws for `model` with `seed` (model.path=null), in
    `directory`, which it returns."""
    model = dataclasses.replace(model, path=None)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_config(model), indent=2))
    tensors = {name: tensor.contiguous() for name, tensor, _ in random_tensors(model, seed)}
    write_weights(directory, tensors, num_files)
    return directory
