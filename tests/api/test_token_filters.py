"""min_p, logit_bias, allowed_token_ids and bad_words through `generate` (tiny engine, decode rounds of a few
steps, overlapped): their effect on outputs, rows that use none of them untouched, bad input refused."""

import pytest

from nvllm import SamplingParams
from tests.helpers.engine_utils import TINY_VOCAB_SIZE, random_prompt, tiny_llm

PROMPTS = [random_prompt(16, seed) for seed in range(3)]
GREEDY = SamplingParams(temperature=0, max_tokens=20)


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(kvcache_block_size=16, num_decode_steps=3) as engine:
        yield engine


@pytest.fixture(scope="module")
def greedy_tokens(llm):
    return [out.outputs[0].token_ids for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def tokens_of(llm, params: SamplingParams, prompts=PROMPTS) -> list[list[int]]:
    return [c.token_ids for out in llm.generate(prompts, params, use_tqdm=False) for c in out.outputs]


def test_min_p_of_one_is_greedy(llm, greedy_tokens):
    for seed in range(3):
        params = SamplingParams(temperature=1.0, min_p=1.0, max_tokens=20, seed=seed)
        assert tokens_of(llm, params) == greedy_tokens


def test_logit_bias_of_100_forces_its_token_and_of_minus_100_bans_one(llm, greedy_tokens):
    forced = SamplingParams(temperature=1.0, max_tokens=12, seed=0, logit_bias={7: 100})
    assert tokens_of(llm, forced) == [[7] * 12] * len(PROMPTS)
    for prompt, greedy in zip(PROMPTS, greedy_tokens):
        banned = greedy[4]
        params = SamplingParams(temperature=0, max_tokens=20, logit_bias={banned: -100})
        (output,) = tokens_of(llm, params, [prompt])
        assert banned not in output and output[: greedy.index(banned)] == greedy[: greedy.index(banned)]


def test_allowed_token_ids_restrict_every_sampled_token(llm):
    allowed = [3, 50, 999, 4000]
    params = SamplingParams(temperature=1.0, max_tokens=20, n=2, seed=1, allowed_token_ids=allowed)
    outputs = tokens_of(llm, params)
    assert all(set(output) <= set(allowed) for output in outputs)
    assert len({token for output in outputs for token in output}) > 1  # still sampled, not one token forced


def word_of(llm, token_ids: list[int]) -> str | None:
    """The text of `token_ids`, if it is a bad word whose tokenizations include exactly these tokens (within
    the tiny vocabulary)."""
    word = llm.tokenizer.decode(token_ids)
    if not word.strip():
        return None
    params = SamplingParams(bad_words=[word])
    try:
        llm.validate([1], params)  # tokenizes the word as the engine does at submission
    except ValueError:
        return None
    return word if token_ids in params.bad_words_token_ids else None


def contains(output: list[int], token_ids: list[int]) -> bool:
    return any(output[i : i + len(token_ids)] == token_ids for i in range(len(output)))


def test_bad_words_of_one_and_several_tokens_never_appear(llm, greedy_tokens):
    """Each word is a piece of the greedy output: the output with it banned is the greedy one up to its last
    token, which is replaced; words of 2 and 3 tokens end at every step of a round and across rounds."""
    checked = 0
    for prompt, greedy in zip(PROMPTS, greedy_tokens):
        for start, length in [(1, 1), (5, 1), (2, 2), (3, 2), (4, 2), (6, 3), (7, 3), (8, 3)]:
            piece = greedy[start : start + length]
            word = word_of(llm, piece)
            if word is None or contains(greedy[: start + length - 1], piece):
                continue
            params = SamplingParams(temperature=0, max_tokens=20, bad_words=[word])
            (output,) = tokens_of(llm, params, [prompt])
            assert not contains(output, piece), (word, piece, output)
            end = start + length - 1
            assert output[:end] == greedy[:end] and output[end] != greedy[end]
            checked += 1
    assert checked >= 10


def test_sampled_outputs_never_hold_a_bad_word(llm, greedy_tokens):
    pieces = [greedy_tokens[0][2:4], greedy_tokens[1][5:7], greedy_tokens[2][1:2]]
    words = [word_of(llm, piece) for piece in pieces]
    params = SamplingParams(temperature=0.3, max_tokens=20, n=3, seed=5, bad_words=[w for w in words if w])
    for output in tokens_of(llm, params):
        assert not any(contains(output, piece) for piece, word in zip(pieces, words) if word)


def test_rows_without_filters_sample_as_alone_in_a_mixed_batch(llm):
    plain = [
        SamplingParams(temperature=0, max_tokens=16),
        SamplingParams(temperature=1.0, max_tokens=16, seed=3),
        SamplingParams(temperature=0.7, top_p=0.9, max_tokens=16, seed=4, logprobs=2),
    ]
    filtered = [
        SamplingParams(temperature=1.0, max_tokens=16, seed=5, min_p=0.3),
        SamplingParams(temperature=1.0, max_tokens=16, seed=6, logit_bias={1: 5.0}, allowed_token_ids=[1, 2]),
        SamplingParams(temperature=1.0, max_tokens=16, seed=7, bad_words=["the"]),
    ]
    alone = llm.generate(PROMPTS, plain, use_tqdm=False)
    mixed = llm.generate(PROMPTS + PROMPTS, plain + filtered, use_tqdm=False)
    assert [out.outputs[0].token_ids for out in mixed[:3]] == [out.outputs[0].token_ids for out in alone]
    # the model's logits in a batch of other rows differ in the last bits (its matmuls): close, not equal
    alone_logprobs, mixed_logprobs = alone[2].outputs[0].logprobs, mixed[2].outputs[0].logprobs
    for alone_step, mixed_step in zip(alone_logprobs, mixed_logprobs, strict=True):
        assert mixed_step == pytest.approx(alone_step, abs=1e-4)


def test_logprobs_are_of_the_raw_logits_whatever_the_filters(llm):
    """As vLLM's default logprobs_mode (raw_logprobs): the first token's distribution is the model's, before
    the bias that forces the sampled token."""
    plain = llm.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=1, logprobs=3), use_tqdm=False)
    biased = SamplingParams(temperature=0, max_tokens=1, logprobs=3, logit_bias={7: 100}, min_p=0.5)
    (forced,) = llm.generate(PROMPTS[:1], biased, use_tqdm=False)
    top = plain[0].outputs[0].logprobs[0]
    assert forced.outputs[0].token_ids == [7]
    reported = forced.outputs[0].logprobs[0]
    assert {t: v for t, v in reported.items() if t != 7} == {t: v for t, v in top.items() if t != 7}


BAD_FIELDS = [
    (dict(min_p=1.5), "min_p="),
    (dict(min_p=-0.1), "min_p="),
    (dict(min_p=float("nan")), "min_p="),
    (dict(logit_bias={1: 101}), "logit_bias="),
    (dict(logit_bias={-1: 1}), "logit_bias="),
    (dict(logit_bias={"1": 1}), "logit_bias="),
    (dict(logit_bias=[(1, 1)]), "logit_bias="),
    (dict(allowed_token_ids=[]), "allowed_token_ids="),
    (dict(allowed_token_ids=[1, -2]), "allowed_token_ids="),
    (dict(allowed_token_ids=5), "allowed_token_ids="),
    (dict(bad_words="word"), "bad_words="),
    (dict(bad_words=["ok", " "]), "bad_words="),
]


@pytest.mark.parametrize("fields, message", BAD_FIELDS)
def test_bad_fields_name_themselves(fields, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**fields)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(logit_bias={1: 1.0, TINY_VOCAB_SIZE: 1.0}), f"logit_bias: token id.*{TINY_VOCAB_SIZE}"),
        (dict(allowed_token_ids=[5000]), "allowed_token_ids: token id\\(s\\) \\[5000\\]"),
        (dict(bad_words=["量子力学"]), "bad_words: token id"),  # tokens beyond the tiny vocabulary
    ],
)
def test_token_ids_outside_the_vocabulary_are_refused_and_the_engine_serves_the_next(
    llm, greedy_tokens, fields, message
):
    with pytest.raises(ValueError, match=message):
        llm.generate(PROMPTS, SamplingParams(**fields), use_tqdm=False)
    assert llm.is_finished()
    assert tokens_of(llm, GREEDY) == greedy_tokens
