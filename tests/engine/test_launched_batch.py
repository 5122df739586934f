"""LaunchedBatch on CPU tensors: the sampled rows' tokens (padding rows dropped), all at once or step by
step, and their log-probabilities in vLLM's order (the sampled token first, then the top k by rank)."""

from collections.abc import Callable

import torch

from nvllm import SamplingParams
from nvllm.engine.launched_batch import LaunchedBatch, SampledSteps
from nvllm.sampling.logits_processors import Logprobs
from nvllm.scheduler.batch import ScheduledBatch
from nvllm.scheduler.sequence import Sequence

# a decode round of 2 steps over 3 sequences, padded to 4 rows (as a CUDA graph's batch is)
TOKENS = torch.tensor([[11, 13], [21, 22], [31, 32], [0, 0]])
NUM_TOP = 3
# each step's top NUM_TOP ids per row, best first, and their log-probabilities
TOP_IDS = [
    torch.tensor([[12, 11, 13], [5, 6, 7], [31, 30, 33], [0, 0, 0]]),
    torch.tensor([[12, 14, 15], [22, 6, 7], [30, 34, 35], [0, 0, 0]]),
]
# (powers of two, exact in float32)
TOP_VALUES = [torch.tensor([[-0.125, -0.25, -0.5]] * 4), torch.tensor([[-0.5, -1.0, -2.0]] * 4)]
SAMPLED = [torch.tensor([-0.25, -4.0, -0.125, 0.0]), torch.tensor([-8.0, -0.5, -16.0, 0.0])]


def decode_batch(num_seqs: int = 3) -> ScheduledBatch:
    batch = ScheduledBatch(is_prefill=False)
    for _ in range(num_seqs):
        batch.add(Sequence([1, 2], SamplingParams()), 2)
    return batch


def sampled_steps(tokens: torch.Tensor, logprobs: Logprobs | None = None) -> SampledSteps:
    """The host copies the runner's sampling makes, step by step."""
    sampled = SampledSteps(logprobs)
    for step in range(tokens.shape[1]):
        sampled.add(tokens[:, step])
    return sampled


def waits() -> tuple[list, Callable]:
    calls = []
    return calls, calls.append


def test_sampled_tokens_drop_the_padding_rows():
    calls, wait = waits()
    launched = LaunchedBatch(decode_batch(), sampled_steps(TOKENS), wait)
    assert launched.take_tokens(2) == ([[11, 13], [21, 22], [31, 32]], None)  # no request asked for logprobs
    assert launched.all_taken
    assert calls == []  # CPU tensors are on the host already: nothing to wait for


def test_a_round_taken_step_by_step_gives_each_step_once():
    launched = LaunchedBatch(decode_batch(), sampled_steps(TOKENS), waits()[1])
    assert launched.take_tokens(1) == ([[11], [21], [31]], None)
    assert not launched.all_taken
    assert launched.take_tokens(1) == ([[13], [22], [32]], None)
    assert launched.all_taken


def test_sampled_logprobs_put_the_sampled_token_first_then_the_top_k():
    logprobs = Logprobs(NUM_TOP, list(zip(TOP_VALUES, TOP_IDS, SAMPLED)))
    calls, wait = waits()
    launched = LaunchedBatch(decode_batch(), sampled_steps(TOKENS, logprobs), wait, num_logprobs=[2, None, 0])
    _, rows = launched.take_tokens(2)
    assert calls == []
    assert len(rows) == 3 and rows[1] == []  # the second did not ask
    # logprobs=2: its sampled token is the second best at step 0, and not among the top 2 at step 1
    first, second = rows[0]
    assert list(first.items()) == [(11, -0.25), (12, -0.125)]
    assert list(second.items()) == [(13, -8.0), (12, -0.5), (14, -1.0)]
    assert rows[2] == [{31: -0.125}, {32: -16.0}]  # logprobs=0: the sampled token's only
    stepwise = LaunchedBatch(decode_batch(), sampled_steps(TOKENS, logprobs), wait, num_logprobs=[2, None, 0])
    assert [stepwise.take_tokens(1)[1] for _ in range(2)] == [
        [[entries[step]] if entries else [] for entries in rows] for step in range(2)
    ]


def test_a_prefill_counts_the_sequences_whose_prompt_completes():
    partial, complete = Sequence([1, 2, 3, 4], SamplingParams()), Sequence([5, 6], SamplingParams())
    batch = ScheduledBatch(is_prefill=True)
    batch.add(partial, 2)  # 2 of its 4 prompt tokens: nothing sampled
    batch.add(complete, 2)
    # a row per sequence that samples, then a padding row
    launched = LaunchedBatch(batch, sampled_steps(torch.tensor([[40], [0]])), lambda event: None)
    assert launched.take_tokens(1)[0] == [[40]]
