"""Checkpoints are loaded as the model they hold, or refused with an error that names the file, the field or
tensor and what is wrong: RoPE in transformers 4's and 5's layouts (YaRN included) against transformers
itself, a table of broken checkpoints, one line each, and models too large for the machine."""

import copy
import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from nvllm import LLM, SamplingParams
from nvllm.config import ModelConfig
from nvllm.layers.rotary import inverse_frequencies
from nvllm.models.hf_config import rope_settings
from tests.helpers.checkpoints import write_checkpoint
from tests.models.test_model_parity import engine_step_logits

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
        # what transformers' Qwen3Config takes for keys left out (theta 1e4, untied), not Qwen3-0.6B's
        {
            "rope_theta": None,
            "tie_word_embeddings": None,
            "rms_norm_eps": None,
            "max_position_embeddings": None,
        },
    ],
    ids=["t5-default", "t4-yarn", "t5-yarn", "keys-left-out"],
)
def test_rope_settings_compute_what_transformers_computes(base_checkpoint, tmp_path, rope):
    path = variant(base_checkpoint, tmp_path, rope)
    hf = Qwen3ForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        expected = hf.generate(torch.tensor([PROMPT]), max_new_tokens=8, do_sample=False)[0, len(PROMPT) :]
        expected_logits = hf(torch.tensor([PROMPT])).logits[0, -1]
    with engine(path) as llm:
        (output,) = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
        seq = llm.add_request(PROMPT, SamplingParams(temperature=0, max_tokens=1))
        _, logits = engine_step_logits(llm, {seq.seq_id: output["token_ids"][0]})
    assert output["token_ids"] == expected.tolist()
    torch.testing.assert_close(logits[0], expected_logits, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "hf_config",
    [
        {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1e6,
                "factor": 8,
                "original_max_position_embeddings": 32768,
                "beta_fast": 16,
                "beta_slow": 2,
                "truncate": False,
            }
        },
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 100,
                "attention_factor": 1.3,
            }
        },
        # a top-level original context length is the one transformers reads
        {
            "original_max_position_embeddings": 40,
            "rope_scaling": {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 4096},
        },
        {"rope_scaling": {"rope_type": "yarn", "factor": 0.5, "original_max_position_embeddings": 64}},
    ],
    ids=["t4", "t5-untruncated", "attention-factor", "top-level-original", "factor-below-1"],
)
def test_yarn_frequencies_are_transformers(hf_config):
    shape = {"hidden_size": 256, "num_attention_heads": 2, "head_dim": 128, "max_position_embeddings": 8192}
    inv_freq, scale = inverse_frequencies(ModelConfig(head_dim=128, **rope_settings({**shape, **hf_config})))
    hf = Qwen3Config.from_dict(copy.deepcopy({**shape, **hf_config}))  # as from_pretrained; it edits dicts
    reference, reference_scale = ROPE_INIT_FUNCTIONS["yarn"](hf, "cpu")
    torch.testing.assert_close(inv_freq, reference, rtol=1e-6, atol=0)
    assert scale == pytest.approx(reference_scale, rel=1e-12)


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


def written(name: str, text: str):
    def change(directory: Path) -> None:
        (directory / name).write_text(text)

    return change


def removed(name: str):
    def change(directory: Path) -> None:
        (directory / name).unlink()

    return change


K_PROJ = "model.layers.0.self_attn.k_proj.weight"
Q_PROJ = "model.layers.2.self_attn.q_proj.weight"
O_PROJ = "model.layers.1.self_attn.o_proj.weight"
DOWN_PROJ = "model.layers.3.mlp.down_proj.weight"
EMBED = "model.embed_tokens.weight"
INDEX = "model.safetensors.index.json"

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
    ("partial-rotary", {"partial_rotary_factor": 0.5}, None, "partial_rotary_factor=0.5 is not supported"),
    (  # honoured: the biases it asks for must then be there
        "attention-bias",
        {"attention_bias": True},
        None,
        r"weights missing from the checkpoint: .*o_proj.bias",
    ),
    ("activation", {"hidden_act": "gelu"}, None, "hidden_act='gelu'"),
    (
        "sliding-window",
        {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 2},
        None,
        "use_sliding_window=true",
    ),
    (
        "sliding-layers",
        {"layer_types": ["full_attention", "sliding_attention"] * 2},
        None,
        r"layer_types \['full_attention', 'sliding_attention'\]",
    ),
    ("quantized", {"quantization_config": {"quant_method": "fp8"}}, None, "quantization_config"),
    ("no-hidden-size", {"hidden_size": None}, None, r"config.json: missing \['hidden_size'\]"),
    ("typed", {"num_hidden_layers": "4"}, None, "num_hidden_layers='4' must be int"),
    (
        "malformed-json",
        None,
        written("config.json", '{"hidden_size": 128,'),
        "config.json: not a readable JSON",
    ),
    ("no-config", None, removed("config.json"), "has no config.json"),
    ("no-weights", None, removed("model.safetensors"), r"holds no \*.safetensors files"),
    ("bad-index", None, written(INDEX, "[]"), f"{INDEX}: not a safetensors index"),
    (
        "index-names-a-missing-file",
        None,
        written(INDEX, json.dumps({"weight_map": {EMBED: "other.safetensors"}})),
        "other.safetensors: not a readable safetensors file",
    ),
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
        "q-proj-rows",
        None,
        with_tensor(Q_PROJ, lambda t: t[Q_PROJ][:200]),
        r"'.*q_proj.weight' has shape \(200, 128\); the config needs \(256, 128\)",
    ),
    (
        "down-proj-transposed",
        None,
        with_tensor(DOWN_PROJ, lambda t: t[DOWN_PROJ].T),
        r"'.*down_proj.weight' has shape \(256, 128\); the config needs \(128, 256\)",
    ),
    (
        "norm-length",
        None,
        with_tensor("model.norm.weight", lambda t: t["model.norm.weight"][:64]),
        r"'model.norm.weight' has shape \(64,\); the config needs \(128,\)",
    ),
    (  # transformers' rule: as many KV heads as query heads, then the tensors disagree
        "kv-heads-left-out",
        {"num_key_value_heads": None},
        None,
        r"'.*k_proj.weight' has shape \(128, 128\); the config needs \(256, 128\)",
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


def test_a_tensor_parallel_rank_names_the_broken_tensor(base_checkpoint, tmp_path):
    path = variant(base_checkpoint, tmp_path)
    with_tensor(K_PROJ, lambda t: t[K_PROJ][:1])(path)
    with pytest.raises((ValueError, RuntimeError), match=r"'.*k_proj.weight' has shape \(1, 128\)"):
        LLM(
            str(path),
            enforce_eager=True,
            kvcache_block_size=16,
            num_kvcache_blocks=16,
            tensor_parallel_size=2,
        )


@pytest.mark.parametrize(
    "overrides, free_gib, message",
    [
        (
            {},
            3,
            r"qwen3-8b needs 30.5 GiB of weights \(float32\) and 2.0 GiB of KV cache per rank, but cpu has 3",
        ),
        (
            dict(num_kvcache_blocks=50),
            33,
            r"30.5 GiB of weights \(float32\) and 3.5 GiB of KV cache per rank",
        ),
        (dict(dtype="bfloat16"), 12, r"15.3 GiB of weights \(bfloat16\)"),
        # fp8: the layers' matmuls a byte an element (and a scale a row), the embedding and LM head in fp32
        (dict(model__quantization="fp8"), 12, r"11.1 GiB of weights \(float32, fp8 matmuls\)"),
        # on the CPU the ranks share the host: two halves of the weights and two KV budgets
        (dict(tensor_parallel_size=2), 30, r"15.3 GiB of weights .* 2.0 GiB of KV cache on each of 2 ranks"),
    ],
    ids=["weights", "kv-blocks", "bf16", "fp8", "tp-shares-host"],
)
def test_a_model_larger_than_the_machine_is_refused_with_the_numbers(
    monkeypatch, overrides, free_gib, message
):
    from nvllm.runner import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: free_gib * memory.GIB)
    with pytest.raises(ValueError, match=message):
        LLM("qwen3-8b", enforce_eager=True, device="cpu", **overrides)


def test_an_impossible_model_is_refused_before_anything_is_loaded(monkeypatch):
    from nvllm.engine import llm_engine

    def never(path):
        raise AssertionError("loading began")

    monkeypatch.setattr(llm_engine, "load_tokenizer", never)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"qwen3-32b needs \d+\.\d GiB of weights .* but cpu has"):
        LLM("qwen3-32b", device="cpu", model__intermediate_size=10_000_000)  # 36 TiB of weights
    assert time.perf_counter() - start < 0.5
