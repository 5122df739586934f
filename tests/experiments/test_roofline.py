"""The roofline bound of a workload (`experiments.studies.roofline`), against values worked out by hand."""

import pytest

from experiments.studies.roofline import roofline
from nvllm.profiling.utilization import ModelWork

WORK = ModelWork(
    linear_flops_per_token=10,
    lm_head_flops_per_row=5,
    attention_flops_per_key=1,
    weight_bytes_per_step=100,
    kv_bytes_per_token=2,
)


def test_prefill_at_peak_flops_and_each_decode_step_at_its_slower_limit():
    # prompts of 2 and 1 tokens, 3 and 1 output tokens: prefill 3 tokens x 10 + (3 + 1) keys + 2 LM-head rows
    # x 5 = 44 FLOPs; then two decode steps of the first sequence, over 3 and 4 keys
    lengths = [(2, 3), (1, 1)]
    compute_bound = roofline(WORK, lengths, bytes_per_s=100, flops_per_s=10)
    assert compute_bound.prefill_s == pytest.approx(4.4)
    assert compute_bound.decode_s == pytest.approx((15 + 3) / 10 + (15 + 4) / 10)  # FLOPs over bytes
    assert compute_bound.output_tok_per_s == pytest.approx(4 / (4.4 + 3.7))
    # bytes: the weights, the keys read and the new token's K/V written
    memory_bound = roofline(WORK, lengths, bytes_per_s=10, flops_per_s=10)
    assert memory_bound.decode_s == pytest.approx((100 + (3 + 1) * 2) / 10 + (100 + (4 + 1) * 2) / 10)
