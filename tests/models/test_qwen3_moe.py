"""Qwen3-MoE against transformers' implementation on a tiny random checkpoint transformers wrote (8 experts,
top-2, renormalised, one dense layer through `mlp_only_layers`): greedy tokens and top-k log-probabilities in
fp32 at TP=1 and TP=2; the router's choice on ties; the Triton grouped matmuls in Triton's interpreter
against the torch reference; the settings refused by name; the presets' sizes and the memory check."""

from __future__ import annotations

import pytest

from tests.helpers.family_checkpoints import write_family_checkpoint
from tests.helpers.transformers_parity import assert_greedy_equals_transformers


@pytest.fixture(scope="module")
def moe_checkpoint(tmp_path_factory):
    return write_family_checkpoint(tmp_path_factory.mktemp("qwen3_moe"), "qwen3_moe")


@pytest.mark.parametrize("tp", [1, 2])
def test_greedy_tokens_and_logprobs_equal_transformers(moe_checkpoint, tp):
    assert_greedy_equals_transformers(moe_checkpoint, tensor_parallel_size=tp)
