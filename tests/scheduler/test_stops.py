"""StopChecker: how many sampled tokens a sequence takes and why it stops, against hand-computed cases (EOS,
ignore_eos, stop_token_ids, max_tokens, max_model_len, min_tokens, stop strings through the detokenizer)."""

import pytest

from nvllm import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.scheduler.stops import LENGTH, STOP, StopChecker
from nvllm.tokenizer.detokenizer import IncrementalDetokenizer
from nvllm.tokenizer.tokenizer import load_tokenizer

EOS = 7
PROMPT = [1, 2, 3, 4]


def sequence(completion: list[int] = (), **params) -> Sequence:
    """A sequence with PROMPT and `completion` already on the host."""
    seq = Sequence(PROMPT, SamplingParams(**params))
    seq.token_ids += completion
    return seq


def test_tokens_left_is_the_nearer_of_max_tokens_and_max_model_len():
    checker = StopChecker((EOS,), max_model_len=20)
    assert checker.tokens_left(sequence(max_tokens=10)) == 10
    seq = sequence([5, 6, 7], max_tokens=10)
    assert checker.tokens_left(seq) == 7
    seq.num_in_flight_tokens = 2  # tokens a launched round samples count as the device's
    assert checker.tokens_left(seq) == 5
    assert checker.tokens_left(seq, seq.host_len) == 7
    assert checker.tokens_left(sequence(max_tokens=100)) == 20 - 4  # max_model_len is nearer
    assert checker.tokens_left(sequence(max_tokens=100), length=20) == 0


@pytest.mark.parametrize(
    "params, new_tokens, expected",
    [
        ({}, [5, EOS, 6, 6], (2, (STOP, None))),  # EOS taken, the tokens after it discarded
        ({}, [5, 6, 6], (3, None)),
        ({"ignore_eos": True}, [5, EOS, 6], (3, None)),
        ({"stop_token_ids": [9]}, [5, 9, EOS], (2, (STOP, 9))),  # the stop reason is the token
        ({"stop_token_ids": [9]}, [EOS, 9], (1, (STOP, None))),
        ({"stop_token_ids": [9], "ignore_eos": True}, [EOS, 9, 6], (2, (STOP, 9))),
        ({"stop_token_ids": [EOS]}, [5, EOS], (2, (STOP, None))),  # EOS is checked first, as in vLLM
        ({"stop_token_ids": [EOS], "ignore_eos": True}, [5, EOS], (2, (STOP, EOS))),
        ({"max_tokens": 3}, [5, 6, 6, 6], (3, (LENGTH, None))),
        ({"max_tokens": 3}, [5, 6, 6], (3, (LENGTH, None))),
        ({"max_tokens": 3}, [5, 6, EOS], (3, (STOP, None))),  # a stop at the last token allowed wins
        ({"max_tokens": 3}, [5, 6, EOS, 6], (3, (STOP, None))),
        ({"max_tokens": 3}, [5, 6, 6, EOS], (3, (LENGTH, None))),  # an EOS past max_tokens is not seen
    ],
)
def test_take_stops_at_the_first_rule_that_ends_the_sequence(params, new_tokens, expected):
    assert StopChecker((EOS,), max_model_len=100).take(sequence(**params), new_tokens) == expected


def test_take_at_max_model_len():
    checker = StopChecker((EOS,), max_model_len=6)
    assert checker.take(sequence([5], max_tokens=50), [6, 6, 6]) == (1, (LENGTH, None))
    at_limit = sequence([5, 6], max_tokens=50)  # 6 tokens: the token it got would pass the limit
    assert checker.take(at_limit, [6]) == (0, (LENGTH, None))
    assert checker.take(at_limit, [EOS]) == (0, (LENGTH, None))


# min_tokens=3: a stop token or string counts only from the 4th output token on (the sampler never draws
# a stop token before, as in vLLM); `done` output tokens are already on the host
@pytest.mark.parametrize(
    "done, new_tokens, expected",
    [
        ([], [5, 6, EOS, 6], (4, None)),  # EOS as the 3rd output token: held back
        ([], [5, 6, 6, EOS, 6], (4, (STOP, None))),  # as the 4th: stops
        ([5, 6], [EOS, 6], (2, None)),
        ([5, 6], [6, EOS, 6], (2, (STOP, None))),
        ([5, 6], [9, 6], (2, None)),
        ([5, 6, 6], [9, 6], (1, (STOP, 9))),
    ],
)
def test_min_tokens_holds_stops_back(done, new_tokens, expected):
    seq = sequence(done, min_tokens=3, stop_token_ids=[9])
    assert StopChecker((EOS,), max_model_len=100).take(seq, new_tokens) == expected


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(None)  # the built-in Qwen3 one


TEXT = "Hello world, stop here now"  # tokens: Hello| world|,| stop| here| now


@pytest.mark.parametrize(
    "params, expected, text",
    [
        ({"stop": " stop"}, (4, (STOP, " stop")), "Hello world,"),
        ({"stop": "ld, st"}, (4, (STOP, "ld, st")), "Hello wor"),  # across tokens: found at the last one
        ({"stop": ["here", "world"]}, (2, (STOP, "world")), "Hello "),  # the one that ends first
        ({"stop": " stop", "include_stop_str_in_output": True}, (4, (STOP, " stop")), "Hello world, stop"),
        ({"stop": " stop", "max_tokens": 3}, (3, (LENGTH, None)), "Hello world,"),
        ({"stop": "nowhere"}, (6, None), TEXT),
        ({"stop": " stop", "min_tokens": 4}, (6, None), TEXT),  # completed by the 4th token: held back
        ({"stop": " stop", "min_tokens": 3}, (4, (STOP, " stop")), "Hello world,"),
    ],
)
def test_stop_strings_through_the_detokenizer(tokenizer, params, expected, text):
    token_ids = tokenizer.encode(TEXT)
    assert len(token_ids) == 6
    seq = sequence(**params)
    seq.detokenizer = IncrementalDetokenizer(
        tokenizer,
        seq.sampling_params.stop_strings,
        seq.sampling_params.include_stop_str_in_output,
        skip_special_tokens=seq.sampling_params.skip_special_tokens,
    )
    assert StopChecker((tokenizer.eos_token_id,), max_model_len=100).take(seq, token_ids) == expected
    seq.detokenizer.finish()
    assert seq.detokenizer.text == text
