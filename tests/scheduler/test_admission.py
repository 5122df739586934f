"""Admission: a prompt's chunk takes what the budget allows but never all of it but one token (a decode step
reads its input token from the token table, where only sampled tokens are)."""

import pytest

from nvllm import SamplingParams
from nvllm.scheduler.admission import prefill_chunk
from nvllm.scheduler.sequence import Sequence
from tests.helpers.scheduler_utils import bare_scheduler, run_step


@pytest.mark.parametrize(
    ("num_uncomputed", "budget", "chunk"),
    [(5, 10, 5), (5, 5, 5), (5, 4, 3), (5, 3, 3), (2, 1, 0), (6, 4, 4), (1, 1, 1)],
)
def test_a_chunk_is_all_that_fits_but_never_all_but_one(num_uncomputed, budget, chunk):
    seq = Sequence(list(range(num_uncomputed)), SamplingParams())
    assert prefill_chunk(seq, budget) == chunk


def test_admission_waits_when_one_token_of_budget_is_left():
    scheduler = bare_scheduler(num_blocks=16, max_num_batched_tokens=5)
    first, second = Sequence([1, 2, 3, 4], SamplingParams()), Sequence([5, 6, 7], SamplingParams())
    for seq in (first, second):
        scheduler.add(seq)
    batch, _ = run_step(scheduler)
    assert batch.seqs == [first] and list(scheduler.waiting) == [second]  # 4 tokens, then 1 left: none taken


def test_a_prompt_chunk_never_leaves_a_single_token_for_decode():
    """Decode steps take a sequence's newest token from the device's token table, where only sampled tokens
    are: the last prompt token must go to a prefill step, which samples."""
    scheduler = bare_scheduler(num_blocks=8, max_num_batched_tokens=4)
    seq = Sequence([1, 2, 3, 4, 5], SamplingParams(max_tokens=3))
    scheduler.add(seq)
    chunks = []
    while seq.num_completion_tokens == 0:
        batch, _ = run_step(scheduler)
        assert batch.is_prefill
        chunks.append(batch.num_new_tokens)
    assert chunks == [[3], [2]]  # not 4 then 1
