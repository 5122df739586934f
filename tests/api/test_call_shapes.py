"""`generate` as vLLM's users call it: one prompt (a string, token ids, a prompt dict) or a list of them,
`sampling_params` left out, one priority for one prompt, TypeError for arguments of the wrong type; and the
log-probability fields as vLLM fills them (`cumulative_logprob`, `logprobs=-1`, the sampled token first)."""

import math

import pytest

from nvllm import SamplingParams
from tests.helpers.engine_utils import TINY_VOCAB_SIZE, random_prompt, tiny_llm

PROMPT = random_prompt(12, seed=7)
GREEDY = SamplingParams(temperature=0, max_tokens=8)


@pytest.fixture(scope="module")
def llm():
    # max_logprobs=-1: no cap, so that logprobs=-1 (the whole vocabulary) is served
    with tiny_llm(kvcache_block_size=16, num_decode_steps=4, max_logprobs=-1) as engine:
        yield engine


@pytest.fixture(scope="module")
def expected(llm):
    text = llm.tokenizer.decode(PROMPT)
    return {
        "ids": llm.generate([PROMPT], GREEDY, use_tqdm=False),
        "text": llm.generate([text], GREEDY, use_tqdm=False),
    }


def test_one_prompt_of_every_shape_gives_a_list_of_one(llm, expected):
    text = llm.tokenizer.decode(PROMPT)
    assert llm.generate(text, GREEDY, use_tqdm=False) == expected["text"]
    assert llm.generate({"prompt": text}, GREEDY, use_tqdm=False) == expected["text"]
    assert llm.generate([{"prompt": text}], GREEDY, use_tqdm=False) == expected["text"]
    assert llm.generate(PROMPT, GREEDY, use_tqdm=False) == expected["ids"]
    assert llm.generate({"prompt_token_ids": PROMPT}, GREEDY, use_tqdm=False) == expected["ids"]
    assert llm.generate([{"prompt_token_ids": PROMPT}], GREEDY, use_tqdm=False) == expected["ids"]
    assert llm.generate(PROMPT, GREEDY, use_tqdm=False, priority=0) == expected["ids"]
    assert [delta.token_ids for _, delta in llm.stream(PROMPT, GREEDY)] != []


def test_sampling_params_default_to_sampling_params(llm):
    (out,) = llm.generate(PROMPT, use_tqdm=False)
    assert len(out.outputs[0].token_ids) == SamplingParams().max_tokens
    assert sum(len(delta.token_ids) for _, delta in llm.stream([PROMPT])) == SamplingParams().max_tokens


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda llm: llm.generate(None, GREEDY), "prompts must be"),
        (lambda llm: llm.generate(5, GREEDY), "prompts must be"),
        (lambda llm: llm.generate([PROMPT, 5.0], GREEDY), "got float"),
        (lambda llm: llm.generate([[5, 6.0]], GREEDY), "token ids must be integers"),
        (lambda llm: llm.generate([{"prompt": 5}], GREEDY), "got int"),
        (lambda llm: llm.generate([PROMPT], "greedy"), "expected SamplingParams or a list of them, got str"),
        (lambda llm: llm.generate([PROMPT], [{"temperature": 0}]), "expected SamplingParams, got dict"),
        (lambda llm: llm.generate([PROMPT], GREEDY, priority="a"), "priority='a'"),
        (lambda llm: llm.generate([PROMPT], GREEDY, priority=[1.5]), "priority=1.5"),
        (lambda llm: llm.generate([PROMPT, PROMPT], GREEDY, priority=0), "one integer per prompt"),
    ],
)
def test_arguments_of_the_wrong_type_raise_type_error(llm, expected, call, message):
    with pytest.raises(TypeError, match=message):
        call(llm)
    assert llm.generate([PROMPT], GREEDY, use_tqdm=False) == expected["ids"]


def test_a_prompt_dict_without_a_prompt_is_refused(llm):
    with pytest.raises(ValueError, match="'prompt' or 'prompt_token_ids'"):
        llm.generate({"text": "hi"}, GREEDY)


SAMPLED = SamplingParams(temperature=1.0, seed=3, max_tokens=12)


def with_logprobs(num: int) -> SamplingParams:
    return SamplingParams(temperature=1.0, seed=3, max_tokens=12, logprobs=num)


def test_cumulative_logprob_sums_the_sampled_tokens_log_probabilities(llm):
    (plain,) = llm.generate(PROMPT, SAMPLED, use_tqdm=False)
    assert plain.outputs[0].cumulative_logprob is None
    (out,) = llm.generate(PROMPT, with_logprobs(0), use_tqdm=False)
    completion = out.outputs[0]
    assert completion.token_ids == plain.outputs[0].token_ids
    total = sum(entry[token] for token, entry in zip(completion.token_ids, completion.logprobs))
    assert completion.cumulative_logprob == pytest.approx(total) and total < 0
    *_, last = (delta for _, delta in llm.stream(PROMPT, with_logprobs(0)))
    assert last.cumulative_logprob == pytest.approx(total)


def test_logprobs_minus_one_gives_the_whole_vocabulary(llm):
    (top,) = llm.generate(PROMPT, with_logprobs(3), use_tqdm=False)
    (everything,) = llm.generate(PROMPT, with_logprobs(-1), use_tqdm=False)
    assert everything.outputs[0].token_ids == top.outputs[0].token_ids
    for entry, top_entry in zip(everything.outputs[0].logprobs, top.outputs[0].logprobs):
        assert len(entry) == TINY_VOCAB_SIZE
        assert math.fsum(math.exp(value) for value in entry.values()) == pytest.approx(1.0, abs=1e-4)
        assert all(entry[token] == pytest.approx(value) for token, value in top_entry.items())


def test_the_sampled_token_comes_first_then_the_top_k_by_rank(llm):
    (out,) = llm.generate(PROMPT, with_logprobs(5), use_tqdm=False)
    completion = out.outputs[0]
    for token, entry in zip(completion.token_ids, completion.logprobs):
        first, *ranked = entry
        assert first == token
        values = [entry[t] for t in ranked]
        assert values == sorted(values, reverse=True) and len(ranked) in (4, 5)
