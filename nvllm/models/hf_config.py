"""A Hugging Face checkpoint's `config.json` as a `ModelConfig`. Every field that would change the model is
either honoured or refused by name: a checkpoint never runs as a different model than the one it holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nvllm.config import ModelConfig, to_dataclass
from nvllm.models.registry import model_class

ARCHITECTURE_KEYS = (  # read as they are; each must be there
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)
# What transformers' configs take for a key the file leaves out, in every family here (each family's own are
# its class's `hf_defaults`): the checkpoint holds the model built with these, not with ModelConfig's
# defaults (Qwen3-0.6B's: tied embeddings, theta 1e6). Derived when left out: num_key_value_heads (one per
# query head) and, where a family's default is None, head_dim (hidden_size / heads).
COMMON_DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "head_dim": None,
}
DEFAULT_ROPE_THETA = 10000.0
# the RoPE scalings implemented (nvllm.layers.rotary), each with the keys it reads
ROPE_KEYS = {
    "default": set(),
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
    "yarn": {
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "truncate",
    },
}


def unsupported_settings(hf: dict) -> list[str]:
    """Settings that change the model in ways this engine does not implement."""
    problems = []
    if hf.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={hf['hidden_act']!r} (only silu)")
    if any(layer != "full_attention" for layer in hf.get("layer_types") or []):
        problems.append(f"layer_types {sorted(set(hf['layer_types']))} (only full_attention)")
    if hf.get("quantization_config"):
        problems.append("quantization_config (only unquantized weights)")
    return problems


def rope_settings(hf: dict) -> dict[str, Any]:
    """`ModelConfig`'s RoPE fields from either layout: transformers 5's `rope_parameters` (theta, type and
    scaling together) or transformers 4's top-level `rope_theta` beside a `rope_scaling` dict."""
    parameters = {**(hf.get("rope_scaling") or {}), **(hf.get("rope_parameters") or {})}
    rope_type = parameters.pop("rope_type", parameters.pop("type", "default"))
    if rope_type not in ROPE_KEYS:
        raise ValueError(f"rope_type={rope_type!r} is not supported (supported: {sorted(ROPE_KEYS)})")

    def first_set(*values: Any) -> Any:
        return next(value for value in values if value is not None)

    # transformers reads these top-level keys too: theta and the rotated fraction where the RoPE parameters
    # leave them out, and a scaling's original context length over theirs
    theta = first_set(parameters.pop("rope_theta", None), hf.get("rope_theta"), DEFAULT_ROPE_THETA)
    rotated = first_set(parameters.pop("partial_rotary_factor", None), hf.get("partial_rotary_factor"), 1.0)
    if rotated != 1.0:
        raise ValueError(f"partial_rotary_factor={rotated} is not supported (RoPE over the whole head)")
    if rope_type != "default" and hf.get("original_max_position_embeddings") is not None:
        parameters["original_max_position_embeddings"] = hf["original_max_position_embeddings"]
    unknown = sorted(set(parameters) - ROPE_KEYS[rope_type])
    if unknown:
        raise ValueError(f"RoPE setting(s) {unknown} of rope_type={rope_type!r} are not supported")
    settings = {"rope_theta": theta, "rope_scaling": rope_type}
    if rope_type != "default":
        if parameters.get("original_max_position_embeddings") is None or parameters.get("factor") is None:
            raise ValueError(f"{rope_type} RoPE needs factor and original_max_position_embeddings")
        settings.update({f"rope_{key}": value for key, value in parameters.items() if value is not None})
        settings["rope_scaling_factor"] = settings.pop("rope_factor")
    return settings


def eos_settings(hf: dict, generation_config: Path) -> dict[str, Any]:
    """The tokens that end a sequence: config.json's `eos_token_id` and generation_config.json's (an id or a
    list each; vLLM stops at generation_config's too), the first as `eos_token_id`, the others as extras."""
    listed = [hf.get("eos_token_id")]
    if generation_config.is_file():
        listed.append(read_config_json(generation_config).get("eos_token_id"))
    ids = []
    for entry in listed:
        for token in entry if isinstance(entry, list) else [entry]:
            if token is not None and token not in ids:
                ids.append(token)
    if not ids:
        return {}
    return {"eos_token_id": ids[0], "extra_eos_token_ids": ids[1:] or None}


def read_config_json(config_file: Path) -> dict:
    try:
        hf = json.loads(config_file.read_text())
    except (OSError, UnicodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{config_file}: not a readable JSON config ({error})") from None
    if not isinstance(hf, dict):
        raise ValueError(f"{config_file}: a config must be a JSON object")
    return hf


def model_from_checkpoint(path: str, base: ModelConfig | None = None) -> ModelConfig:
    """The architecture of the checkpoint in `path` (from its `config.json`); dtype and the like kept from
    `base`."""
    path = os.path.expanduser(path)
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise ValueError(f"model.path={path!r} has no config.json")
    hf = read_config_json(config_file)
    missing = [key for key in ARCHITECTURE_KEYS if hf.get(key) is None]
    if missing:
        raise ValueError(f"{config_file}: missing {missing}")
    architecture = (hf.get("architectures") or [ModelConfig.architecture])[0]
    try:
        family = model_class(architecture)
    except ValueError as error:
        raise ValueError(f"{config_file}: {error}") from None
    # another name transformers writes for a key (the config class's attribute map)
    hf = {**{key: hf[alias] for alias, key in family.hf_aliases.items() if alias in hf}, **hf}
    problems = unsupported_settings(hf) + family.unsupported_settings(hf)
    if problems:
        raise ValueError(f"{config_file}: unsupported model settings: {'; '.join(problems)}")
    try:
        rope = rope_settings(hf)
    except ValueError as error:
        raise ValueError(f"{config_file}: {error}") from None
    defaults = {**COMMON_DEFAULTS, **family.hf_defaults}
    present = (*ARCHITECTURE_KEYS, *defaults, "num_key_value_heads")
    values = {**defaults, **{key: hf[key] for key in present if hf.get(key) is not None}}
    if values["head_dim"] is None:
        values["head_dim"] = hf["hidden_size"] // hf["num_attention_heads"]
    values.setdefault("num_key_value_heads", hf["num_attention_heads"])
    values.update(eos_settings(hf, Path(path) / "generation_config.json"))
    values.update(rope, name=Path(path).name, path=path, architecture=architecture)
    try:
        return to_dataclass(ModelConfig, values, base or ModelConfig())
    except ValueError as error:
        raise ValueError(f"{config_file}: {error}") from None
