"""Weights into a model: from an HF safetensors checkpoint, or seeded random ones of the same names.

Both are a stream of (HF parameter name, full tensor, where it comes from) fed through the same loader,
which checks each tensor's shape against the architecture's, maps q/k/v and gate/up onto our packed
parameters and lets each parameter's module copy in its own tensor-parallel slice.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from nvllm.config import ModelConfig
from nvllm.models.registry import model_class

Tensors = Iterable[tuple[str, torch.Tensor, str]]  # (HF name, full tensor, its file or "random weights")


def checkpoint_tensors(path: str, device: str = "cpu") -> Iterator[tuple[str, torch.Tensor, str]]:
    """Every tensor of the checkpoint in `path`: the shards its index names, or every `*.safetensors`, read
    straight onto `device` (on a GPU, no stop in host memory on the way)."""
    directory = Path(os.path.expanduser(path))
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, UnicodeError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{index}: not a safetensors index ({type(error).__name__}: {error})") from None
        files = sorted({directory / name for name in weight_map.values()})
    else:
        files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"model.path={path!r} holds no *.safetensors files")
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device=device) as shard:
                for name in shard.keys():
                    yield name, shard.get_tensor(name), str(file)
        except (OSError, SafetensorError) as error:  # truncated, corrupt, missing
            raise ValueError(f"{file}: not a readable safetensors file ({error})") from None


def hf_parameter_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The parameter names and shapes of transformers' implementation of this config's architecture."""
    hidden, head_dim = config.hidden_size, config.head_dim
    q_size, kv_size = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    family = model_class(config.architecture)
    layer = family.layer_shape(config)
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
            }
        )
        shapes.update({f"{prefix}.mlp.{name}": shape for name, shape in family.mlp_shapes(config, i).items()})
        if layer.qk_norm:
            shapes[f"{prefix}.self_attn.q_norm.weight"] = (head_dim,)
            shapes[f"{prefix}.self_attn.k_norm.weight"] = (head_dim,)
        if layer.qkv_bias:
            shapes[f"{prefix}.self_attn.q_proj.bias"] = (q_size,)
            shapes[f"{prefix}.self_attn.k_proj.bias"] = (kv_size,)
            shapes[f"{prefix}.self_attn.v_proj.bias"] = (kv_size,)
        if layer.o_bias:
            shapes[f"{prefix}.self_attn.o_proj.bias"] = (hidden,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, hidden)
    return shapes


def parameter_bytes(config: ModelConfig, dtype: torch.dtype) -> dict[str, int]:
    """The bytes each parameter of `hf_parameter_shapes` takes in the engine, unsharded: `dtype`'s, except
    that with `quantization=fp8` the decoder layers' matmul weights take one byte an element and a 4-byte
    scale a row (`nvllm.ops.fp8`)."""
    sizes = {}
    for name, shape in hf_parameter_shapes(config).items():
        quantized = config.quantization == "fp8" and name.startswith("model.layers.")
        if quantized and name.endswith("_proj.weight"):
            sizes[name] = math.prod(shape) + 4 * shape[0]
        else:
            sizes[name] = math.prod(shape) * dtype.itemsize
    return sizes


def random_tensors(config: ModelConfig, seed: int, device: str = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """Seeded random weights, each tensor drawn from its own generator (seed, name): the same values
    whatever the TP size or load order. Scales keep the model's output dependent on its context (the
    usual N(0, 0.02) makes a random Qwen3 repeat one token): norm weights U(0.8, 1.2), biases N(0, 0.1^2),
    embeddings N(0, 1/hidden), matrices N(0, (2/sqrt(fan_in))^2)."""
    for name, shape in hf_parameter_shapes(config).items():
        generator = torch.Generator(device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        tensor = torch.empty(shape, device=device)
        fill_random(tensor, name, config.hidden_size, generator)
        yield name, tensor, "random weights"


def fill_random(tensor: torch.Tensor, name: str, hidden_size: int, generator: torch.Generator) -> None:
    """`tensor` (the parameter `name`) drawn with `random_tensors`' spread; a matrix's input dimension is its
    last (stacked experts' `[E, out, in]` too)."""
    if name.endswith(".bias"):
        tensor.normal_(0.0, 0.1, generator=generator)
    elif tensor.dim() == 1:
        tensor.uniform_(0.8, 1.2, generator=generator)
    else:
        std = 1 / math.sqrt(hidden_size) if "embed" in name else 2 / math.sqrt(tensor.shape[-1])
        tensor.normal_(0.0, std, generator=generator)


def load_weights(model: nn.Module, tensors: Tensors, expected_shapes: dict[str, tuple[int, ...]]) -> None:
    """Copy each named tensor into its parameter (through its module's `weight_loader` where it has one:
    the tensor-parallel layers take their slice); every tensor must have the shape the architecture
    expects (`expected_shapes`, unsharded), and every parameter must be written, so a checkpoint that
    disagrees with its config, or a loader that skips a parameter, is an error rather than noise."""
    params = dict(model.named_parameters())
    packed = getattr(model, "packed_modules", {})
    # a sparse family's per-expert tensors go into stacked parameters: name → (parameter, shard id) or None
    expert_parameter = getattr(model, "expert_parameter", lambda name: None)
    expert_shards = model.expert_shards() if hasattr(model, "expert_shards") else {}
    loaded = set()
    for name, tensor, origin in tensors:
        expected = expected_shapes.get(name)
        if expected is None:
            if name == "lm_head.weight" and name not in params:
                continue  # tied to the embedding: the checkpoint stores it twice
            raise ValueError(f"{origin}: tensor {name!r} has no parameter in {type(model).__name__}")
        if tuple(tensor.shape) != expected:
            raise ValueError(
                f"{origin}: tensor {name!r} has shape {tuple(tensor.shape)}; the config needs {expected}"
            )
        fragment = next((f for f in packed if f".{f}." in name), None)
        shard_id = ()
        if (routed := expert_parameter(name)) is not None:
            name, shard_id = routed
        elif fragment is not None:
            target, shard = packed[fragment]
            name, shard_id = name.replace(f".{fragment}.", f".{target}."), (shard,)
        param = params[name]
        owner = model.get_submodule(name.rpartition(".")[0])
        loader = getattr(owner, "weight_loader", None)
        if loader is not None:
            loader(param, tensor, *shard_id)
        else:
            param.data.copy_(tensor)
        loaded.add((name, *shard_id))
    is_packed = {n: [s for t, s in packed.values() if f".{t}." in n] for n in params}
    required = {(n, s) for n, shards in is_packed.items() for s in shards} | {
        (n,) for n, shards in is_packed.items() if not shards and n not in expert_shards
    }
    required |= {(n, *s) for n, shards in expert_shards.items() for s in shards}
    missing = sorted(str(m) for m in required - loaded)
    if missing:
        raise ValueError(
            f"weights missing from the checkpoint: {missing[:8]}{' ...' if len(missing) > 8 else ''}"
        )
