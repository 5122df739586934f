"""min_p, logit_bias, allowed_token_ids and bad words in the sampler, against hand-computed distributions and
a hand-written reference of vLLM's bad-words rule."""

import math

import pytest
import torch

from nvllm import SamplingParams
from nvllm.sampling.bad_words import bad_words_token_ids
from nvllm.sampling.request_processing import request_processing
from nvllm.sampling.sampler import Sampler
from nvllm.scheduler.sequence import Sequence
from tests.helpers.sampled_frequencies import assert_follows

NUM_DRAWS = 40_000
PROBS = [0.5, 0.3, 0.15, 0.05]
LOGITS = [math.log(p) for p in PROBS]


def draw(logits: list[float], params: SamplingParams, num_draws: int = NUM_DRAWS, step: int = 0):
    """`num_draws` samples of one row of logits, with the request processing the engine would build."""
    seqs = [Sequence([0], params) for _ in range(num_draws)]
    batch = Sampler.prepare([params] * num_draws, [None] * num_draws, "cpu")
    batch.processing = request_processing(seqs, None, len(logits), (10**9,), "cpu", batch.inv_temperatures)
    return Sampler().sample(torch.tensor([logits]).repeat(num_draws, 1), batch, step)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.mark.parametrize(
    "temperature, min_p, kept",
    [
        (1.0, 0.2, [0.5, 0.3, 0.15, 0.0]),  # 0.05 < 0.2 * 0.5
        (1.0, 0.59, [0.5, 0.3, 0.0, 0.0]),  # 0.3 >= 0.59 * 0.5 > 0.15
        # at T=2 the probabilities are in proportion to sqrt(p): that of 0.15 is 0.55 of the top one's
        (2.0, 0.5, [math.sqrt(p) for p in PROBS[:3]] + [0.0]),
        (2.0, 0.56, [math.sqrt(p) for p in PROBS[:2]] + [0.0, 0.0]),
    ],
)
def test_min_p_keeps_tokens_above_its_share_of_the_top_one_in_proportion(temperature, min_p, kept):
    """`kept`: the weights after temperature of the tokens min_p keeps."""
    draws = draw(LOGITS, SamplingParams(temperature=temperature, min_p=min_p))
    assert_follows(draws, [k / sum(kept) for k in kept])


def test_min_p_of_one_is_greedy():
    logits = torch.randn(64).tolist()
    draws = draw(logits, SamplingParams(temperature=1.5, min_p=1.0), num_draws=200)
    assert set(draws.tolist()) == {max(range(64), key=logits.__getitem__)}


def test_logit_bias_is_added_before_temperature():
    # a bias of log(3) on token 3 at T=1 triples its weight; at T=2 the biased logits are halved
    bias = {3: math.log(3.0)}
    weights = [0.5, 0.3, 0.15, 0.15]
    assert_follows(draw(LOGITS, SamplingParams(logit_bias=bias)), [w / 1.1 for w in weights])
    weights = [math.sqrt(w) for w in weights]
    draws = draw(LOGITS, SamplingParams(temperature=2.0, logit_bias=bias))
    assert_follows(draws, [w / sum(weights) for w in weights])


def test_allowed_tokens_sample_in_proportion_and_a_bias_cannot_bring_back_another():
    params = SamplingParams(allowed_token_ids=[1, 3], logit_bias={0: 100.0, 3: math.log(2.0)})
    assert_follows(draw(LOGITS, params), [0.0, 0.3 / 0.4, 0.0, 0.1 / 0.4])


def reference_bans(words: list[list[int]], output: list[int]) -> set[int]:
    """vLLM's rule, written out: a word's last token is banned when the output ends with its other tokens."""
    return {
        ids[-1]
        for ids in words
        if len(ids) - 1 <= len(output) and output[len(output) - len(ids) + 1 :] == ids[:-1]
    }


WORDS = [[5], [1, 2], [1, 2, 3], [2, 4], [6, 6, 6]]


def test_bad_words_ban_their_last_token_after_their_prefix_over_rounds():
    """Decode rounds of several steps on rows of different histories and words: at each step, the tokens
    banned are the reference's, from the tokens the rows sampled so far (earlier steps and rounds included,
    carried on the device between batches whose longest words differ)."""
    vocab_size = 8
    outputs = [[], [1], [0, 1, 2], [6, 6], [2, 6]]
    words = [WORDS] * 4 + [[[6, 6]]]
    seqs = []
    for output, row_words in zip(outputs, words):
        seq = Sequence([7, 7] + output, SamplingParams(temperature=0, bad_words=["set below"]))
        seq.num_prompt_tokens = 2
        seq.sampling_params.bad_words_token_ids = row_words  # as the engine tokenizes them
        seqs.append(seq)
    generator = torch.Generator().manual_seed(0)
    for batch_rows, from_host in [(range(5), True), ([4], False), (range(5), False)]:
        batch_seqs = [seqs[row] for row in batch_rows]
        num_steps = None if from_host else [4] * len(batch_seqs)
        batch = Sampler.prepare([s.sampling_params for s in batch_seqs], [None] * len(batch_seqs), "cpu")
        batch.processing = request_processing(
            batch_seqs, num_steps, vocab_size, (10**9,), "cpu", batch.inv_temperatures
        )
        for step in range(1 if from_host else 4):
            logits = torch.zeros(len(batch_seqs), vocab_size)
            processed = batch.processing.processed(logits, step)
            tokens = torch.randint(0, vocab_size, (len(batch_seqs),), generator=generator)
            for index, row in enumerate(batch_rows):
                banned = {t for t in range(vocab_size) if processed[index, t] == float("-inf")}
                assert banned == reference_bans(words[row], outputs[row]), (step, row, outputs[row])
                if row < 2:
                    tokens[index] = row + 1  # rows that write words' prefixes
            batch.processing.sampled(tokens, step, logits)
            for index, row in enumerate(batch_rows):
                outputs[row].append(int(tokens[index]))


class SpacedTokenizer:
    """Words as characters; a leading space makes a token of its own, glued to the next character's."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [ord(c) for c in text.lstrip()]
        return [1000 + ids[0], *ids[1:]] if text.startswith(" ") else ids


def test_bad_words_are_tokenized_alone_and_after_a_space():
    assert bad_words_token_ids(["ab", "  c"], SpacedTokenizer()) == [[97, 98], [1097, 98], [99], [1099]]
