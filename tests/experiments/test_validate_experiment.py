"""`+experiment=validate` on the CPU: the engine's greedy generations against transformers' on the same
tiny checkpoint pass; an engine running other weights than the checkpoint's fails, naming the divergence."""

import json

import pytest
import torch

from experiments.runners import validate
from nvllm.run import compose_config
from nvllm.runner import model_runner

QUIET = ["wandb.mode=disabled", "wandb.group=null", "compile.enabled=false"]
SETTINGS = ["cache.block_size=4", "cache.num_blocks=128", "validate.max_tokens=12"]


def run_validate(tmp_path, *overrides: str) -> dict:
    cfg = compose_config(["+experiment=validate", *QUIET, *SETTINGS, *overrides])
    return validate.run(cfg, tmp_path)


def test_a_checkpoint_the_engine_runs_right_passes(tiny_checkpoint, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is\n\n1, 1, 2, 3, 5, 8,\n")
    metrics = run_validate(tmp_path, f"model.path={tiny_checkpoint}", f"validate.prompts={prompts}")
    printed = capsys.readouterr().out
    assert metrics["passed"] and metrics["num_prompts"] == 2, printed
    assert metrics["num_followed"] == 2 and metrics["tokens_followed"] == metrics["tokens_compared"] == 24
    assert "prompt 0: 12/12 tokens followed" in printed
    assert "Verdict: PASS: 2 prompts: 2 followed all the way, 0 parted at a near-tie, 0 diverged" in printed
    results = json.loads((tmp_path / "results.json").read_text())
    assert [row["prompt"] for row in results["prompts"]] == ["The capital of France is", "1, 1, 2, 3, 5, 8,"]
    assert results["prompts"][0]["nvllm"] == results["prompts"][0]["transformers"]
    assert len(set(results["prompts"][0]["nvllm"])) > 1  # a model whose output depends on its context


def test_a_preset_is_checked_on_its_random_weights(tmp_path, capsys):
    metrics = run_validate(tmp_path, "model=tiny", "seed=3")
    assert metrics["passed"] and metrics["num_followed"] == len(validate.BUILTIN_PROMPTS), capsys.readouterr()


def test_an_engine_running_other_weights_fails_naming_the_divergence(
    tiny_checkpoint, tmp_path, capsys, monkeypatch
):
    loaded = model_runner.checkpoint_tensors

    def one_norm_off(path, device):
        for name, tensor, origin in loaded(path, device):
            if name == "model.layers.1.post_attention_layernorm.weight":
                tensor = tensor * torch.linspace(0.5, 1.5, tensor.numel())
            yield name, tensor, origin

    monkeypatch.setattr(model_runner, "checkpoint_tensors", one_norm_off)
    metrics = run_validate(tmp_path, f"model.path={tiny_checkpoint}")
    printed = capsys.readouterr().out
    assert not metrics["passed"] and metrics["num_divergences"] >= 1, printed
    assert "Verdict: FAIL" in printed and ": NO near-tie" in printed
    results = json.loads((tmp_path / "results.json").read_text())
    diverged = [row for row in results["prompts"] if row["parted_at"] is not None and not row["near_tie"]]
    assert diverged and all(row["fp32_gap"] > metrics["noise"] for row in diverged)


def test_an_unreadable_prompts_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="validate.prompts='/no/such/file': not a readable text file"):
        run_validate(tmp_path, "model=tiny", "validate.prompts=/no/such/file")


# the tiny preset's shape as each other family: random weights the engine draws, written as that family's
# checkpoint, which transformers then runs as its own Llama (llama3 RoPE, tied), Qwen2 or Mistral
FAMILY_OVERRIDES = {
    "llama": [
        "model.architecture=LlamaForCausalLM",
        "model.attention_bias=true",
        "model.rope_scaling=llama3",
        "model.rope_scaling_factor=8.0",
        "model.rope_original_max_position_embeddings=64",
    ],
    "qwen2": ["model.architecture=Qwen2ForCausalLM"],
    "mistral": ["model.architecture=MistralForCausalLM", "model.tie_word_embeddings=false"],
}


@pytest.mark.parametrize("family", FAMILY_OVERRIDES)
def test_a_preset_of_each_family_is_checked_on_its_random_weights(tmp_path, capsys, family):
    metrics = run_validate(tmp_path, "model=tiny", "validate.max_tokens=6", *FAMILY_OVERRIDES[family])
    assert metrics["passed"] and metrics["num_followed"] == len(validate.BUILTIN_PROMPTS), capsys.readouterr()
