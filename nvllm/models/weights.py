"""Weights into a model: from an HF safetensors checkpoint, or seeded random ones of the same names.

Both are a stream of (HF parameter name, full tensor) fed through the same loader, which maps q/k/v and
gate/up onto our packed parameters and lets each parameter take its own tensor-parallel slice.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from nvllm.config import ModelConfig


def checkpoint_tensors(path: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of the checkpoint in `path`: the shards its index names, or every `*.safetensors`."""
    directory = Path(os.path.expanduser(path))
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({directory / name for name in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"model.path={path!r} holds no *.safetensors files")
    for file in files:
        with safe_open(str(file), framework="pt") as shard:
            for name in shard.keys():
                yield name, shard.get_tensor(name)


def hf_parameter_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The parameter names and shapes of transformers' Qwen3ForCausalLM for this config."""
    hidden, head_dim = config.hidden_size, config.head_dim
    q_size, kv_size = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    shapes = {"model.embed_tokens.weight": (config.vocab_size, hidden), "model.norm.weight": (hidden,)}
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}"
        shapes.update(
            {
                f"{prefix}.input_layernorm.weight": (hidden,),
                f"{prefix}.post_attention_layernorm.weight": (hidden,),
                f"{prefix}.self_attn.q_proj.weight": (q_size, hidden),
                f"{prefix}.self_attn.k_proj.weight": (kv_size, hidden),
                f"{prefix}.self_attn.v_proj.weight": (kv_size, hidden),
                f"{prefix}.self_attn.o_proj.weight": (hidden, q_size),
                f"{prefix}.self_attn.q_norm.weight": (head_dim,),
                f"{prefix}.self_attn.k_norm.weight": (head_dim,),
                f"{prefix}.mlp.gate_proj.weight": (config.intermediate_size, hidden),
                f"{prefix}.mlp.up_proj.weight": (config.intermediate_size, hidden),
                f"{prefix}.mlp.down_proj.weight": (hidden, config.intermediate_size),
            }
        )
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, hidden)
    return shapes


def random_tensors(config: ModelConfig, seed: int, device: str = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """Seeded random weights, each tensor drawn from its own generator (seed, name): the same values
    whatever the TP size or load order. Scales keep the model's output dependent on its context (the
    usual N(0, 0.02) makes a random Qwen3 repeat one token): norm weights U(0.8, 1.2), embeddings
    N(0, 1/hidden), matrices N(0, (2/sqrt(fan_in))^2)."""
    for name, shape in hf_parameter_shapes(config).items():
        generator = torch.Generator(device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        tensor = torch.empty(shape, device=device)
        if len(shape) == 1:
            tensor.uniform_(0.8, 1.2, generator=generator)
        else:
            std = 1 / math.sqrt(config.hidden_size) if "embed" in name else 2 / math.sqrt(shape[1])
            tensor.normal_(0.0, std, generator=generator)
        yield name, tensor


def load_weights(model: nn.Module, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy each named tensor into its parameter (through its `weight_loader`); every parameter must be
    written, so a checkpoint that lacks one, or a loader that skips one, is an error rather than noise."""
    params = dict(model.named_parameters())
    packed = getattr(model, "packed_modules", {})
    loaded = set()
    for name, tensor in tensors:
        fragment = next((f for f in packed if f".{f}." in name), None)
        if fragment is not None:
            target, shard_id = packed[fragment]
            param_name = name.replace(f".{fragment}.", f".{target}.")
            param = params[param_name]
            param.weight_loader(param, tensor, shard_id)
            loaded.add((param_name, shard_id))
            continue
        param = params.get(name)
        if param is None:
            if name == "lm_head.weight":
                continue  # tied to the embedding: the checkpoint stores it twice
            raise ValueError(f"checkpoint tensor {name!r} has no parameter in {type(model).__name__}")
        loader = getattr(param, "weight_loader", None)
        if loader is not None:
            loader(param, tensor)
        else:
            if param.shape != tensor.shape:
                raise ValueError(
                    f"{name}: checkpoint shape {tuple(tensor.shape)} != model {tuple(param.shape)}"
                )
            param.data.copy_(tensor)
        loaded.add((name, None))
    is_packed = {n: [s for t, s in packed.values() if f".{t}." in n] for n in params}
    expected = {(n, s) for n, shards in is_packed.items() for s in shards} | {
        (n, None) for n, shards in is_packed.items() if not shards
    }
    missing = sorted(str(m) for m in expected - loaded)
    if missing:
        raise ValueError(
            f"weights missing from the checkpoint: {missing[:8]}{' ...' if len(missing) > 8 else ''}"
        )
