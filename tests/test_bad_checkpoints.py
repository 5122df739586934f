"""Checkpoints are loaded as the model they hold, or refused with an error that names the file, the field or
tensor and what is wrong: RoPE in transformers 4's and 5's layouts (YaRN included) against transformers
itself, and a table of broken checkpoints, one line each."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3ForCausalLM

from nvllm import LLM, SamplingParams
from tests.checkpoints import write_checkpoint

VOCAB_SIZE = 4096  # token-id prompts only: a small LM head keeps each checkpoint cheap to write
PROMPT = list(range(300, 340))  # 40 tokens: past the YaRN case's original context of 16


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("base"), "tiny", seed=3, vocab_size=VOCAB_SIZE)


def variant(base: Path, tmp_path: Path, config_changes: dict | None = None) -> Path:
    """A copy of `base` with `config_changes` merged into its config.json (None values drop the key)."""
    directory = tmp_path / "checkpoint"
    shutil.copytree(base, directory)
    config_file = directory / "config.json"
    config = json.loads(config_file.read_text())
    for key, value in (config_changes or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    config_file.write_text(json.dumps(config))
    return directory


def engine(path: Path) -> LLM:
    return LLM(str(path), enforce_eager=True, kvcache_block_size=16, num_kvcache_blocks=16, max_model_len=64)


@pytest.mark.parametrize(
    "rope",
    [
        # transformers 5: theta under rope_parameters (the top-level default would be 1e6)
        {"rope_theta": None, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        # transformers 4: top-level theta beside a rope_scaling dict
        {
            "rope_theta": 10000.0,
            "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        },
        {
            "rope_theta": None,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "original_max_position_embeddings": 16,
                "beta_fast": 16,
            },
        },
    ],
    ids=["t5-default", "t4-yarn", "t5-yarn"],
)
def test_rope_settings_generate_what_transformers_generates(base_checkpoint, tmp_path, rope):
    path = variant(base_checkpoint, tmp_path, rope)
    hf = Qwen3ForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        expected = hf.generate(torch.tensor([PROMPT]), max_new_tokens=8, do_sample=False)[0, len(PROMPT) :]
    with engine(path) as llm:
        (output,) = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert output["token_ids"] == expected.tolist()


def with_tensor(name: str, make):
    """A change to the checkpoint: tensor `name` replaced by `make(tensors)`."""

    def change(directory: Path) -> None:
        file = directory / "model.safetensors"
        tensors = load_file(str(file))
        tensors[name] = make(tensors).contiguous()
        save_file(tensors, str(file))

    return change


def without_tensor(name: str):
    def change(directory: Path) -> None:
        file = directory / "model.safetensors"
        tensors = load_file(str(file))
        del tensors[name]
        save_file(tensors, str(file))

    return change


def truncated(directory: Path) -> None:
    file = directory / "model.safetensors"
    file.write_bytes(file.read_bytes()[:1000])


def malformed_config(directory: Path) -> None:
    (directory / "config.json").write_text('{"hidden_size": 128,')


K_PROJ = "model.layers.0.self_attn.k_proj.weight"
O_PROJ = "model.layers.1.self_attn.o_proj.weight"
EMBED = "model.embed_tokens.weight"

BROKEN = [  # (id, config.json changes, change to the files, the error's message)
    ("rope-type", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, None, "rope_type='dynamic'"),
    (
        "rope-key",
        {
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 16,
                "mscale": 1,
            }
        },
        None,
        r"RoPE setting\(s\) \['mscale'\]",
    ),
    (
        "yarn-incomplete",
        {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}},
        None,
        "original_max_position",
    ),
    ("attention-bias", {"attention_bias": True}, None, "attention_bias=true"),
    ("activation", {"hidden_act": "gelu"}, None, "hidden_act='gelu'"),
    ("sliding-window", {"use_sliding_window": True}, None, "use_sliding_window=true"),
    ("quantized", {"quantization_config": {"quant_method": "fp8"}}, None, "quantization_config"),
    ("no-hidden-size", {"hidden_size": None}, None, r"config.json: missing \['hidden_size'\]"),
    ("typed", {"num_hidden_layers": "4"}, None, "num_hidden_layers='4' must be int"),
    ("malformed-json", None, malformed_config, "config.json: not a readable JSON config"),
    ("truncated", None, truncated, "model.safetensors: not a readable safetensors file"),
    (
        "k-proj-broadcasts",
        None,
        with_tensor(K_PROJ, lambda t: t[K_PROJ][:1]),
        r"model.safetensors: tensor '.*k_proj.weight' has shape \(1, 128\); the config needs \(128, 128\)",
    ),
    (
        "o-proj-broadcasts",
        None,
        with_tensor(O_PROJ, lambda t: t[O_PROJ][:, :1]),
        r"'.*o_proj.weight' has shape \(128, 1\); the config needs \(128, 256\)",
    ),
    (
        "lm-head-broadcasts",
        None,
        with_tensor("lm_head.weight", lambda t: t["lm_head.weight"][:, :1]),
        rf"'lm_head.weight' has shape \({VOCAB_SIZE}, 1\)",
    ),
    (
        "embedding-too-long",
        None,
        with_tensor(EMBED, lambda t: torch.cat([t[EMBED], t[EMBED][:8]])),
        rf"'model.embed_tokens.weight' has shape \({VOCAB_SIZE + 8}, 128\); the config needs \(4096",
    ),
    (
        "unknown-tensor",
        None,
        with_tensor("model.extra.weight", lambda t: t[EMBED].clone()),
        "'model.extra.weight' has no",
    ),
    ("missing-tensor", None, without_tensor(K_PROJ), r"weights missing from the checkpoint: \[.*k'\)"),
]


@pytest.mark.parametrize(
    "config_changes, change, message", [case[1:] for case in BROKEN], ids=[c[0] for c in BROKEN]
)
def test_a_broken_checkpoint_is_refused_by_name(base_checkpoint, tmp_path, config_changes, change, message):
    path = variant(base_checkpoint, tmp_path, config_changes)
    if change is not None:
        change(path)
    with pytest.raises(ValueError, match=message):
        engine(path)


def test_a_model_larger_than_the_machine_is_refused_with_the_numbers(monkeypatch):
    from nvllm.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 3 * memory.GIB)
    with pytest.raises(ValueError, match=r"qwen3-8b needs 30.5 GiB of weights .* but cpu has 3.0 GiB free"):
        LLM("qwen3-8b", enforce_eager=True, device="cpu")
