"""Each dense family on the GPU against transformers' implementation in fp32 on the same bf16-rounded weights
(tests/helpers/gpu_parity.py). `python -m pytest -m gpu tests/models/test_families_gpu.py`."""

from __future__ import annotations

import pytest

from tests.helpers.family_checkpoints import write_family_checkpoint
from tests.helpers.gpu_parity import assert_follows_transformers_up_to_bf16

pytestmark = pytest.mark.gpu

# head_dim 128 (flash-attn's), 8 query heads over 4 KV heads (Qwen2's derived head_dim too)
GPU_SHAPE = dict(hidden_size=1024, intermediate_size=2048, num_attention_heads=8, head_dim=128)


@pytest.mark.parametrize("family", ["llama3", "llama2", "qwen2", "mistral"])
def test_a_family_on_the_gpu_follows_transformers_up_to_bf16(tmp_path, family):
    overrides = {**GPU_SHAPE, "num_key_value_heads": 4}
    if family in ("qwen2", "llama2"):
        overrides.pop("head_dim")  # derived: 1024 / 8
    path = write_family_checkpoint(tmp_path, family, **overrides)
    assert_follows_transformers_up_to_bf16(path, family)
