"""The router-parity study on a tiny Qwen3-MoE checkpoint in fp32: the engine's routers choose as
transformers' do at every sparse layer and position."""

import random

import torch

from experiments.studies.moe_router_parity import engine_choices, transformers_choices
from nvllm import LLM
from tests.helpers.family_checkpoints import load_family_model, write_family_checkpoint


def test_the_engines_routers_choose_as_transformers_do(tmp_path):
    path = write_family_checkpoint(tmp_path, "qwen3_moe")
    tokens = [random.Random(0).randrange(150_000) for _ in range(40)]
    with LLM(str(path), dtype="float32", enforce_eager=True, max_model_len=128) as llm:
        ours = engine_choices(llm, tokens)
    theirs, logits = transformers_choices(load_family_model(path), tokens)
    assert len(ours) == len(theirs) == 2  # the tiny checkpoint's sparse layers (`mlp_only_layers`: 1 dense)
    assert logits.shape[0] == len(tokens)
    for mine, exact in zip(ours, theirs, strict=True):
        assert mine.shape == (len(tokens), 2)
        torch.testing.assert_close(mine, exact, atol=0, rtol=0)
