"""Misuse that used to fail late or silently: integers past what the engine computes with, logprobs past the
engine's cap, a progress bar on a stderr that cannot be written, a priority the policy ignores."""

import io
import sys
import warnings

import pytest

from nvllm import SamplingParams
from nvllm.engine.config_resolution import engine_config
from tests.helpers.engine_utils import random_prompt, tiny_llm

PROMPTS = [random_prompt(6, seed=720), random_prompt(4, seed=721)]
GREEDY = SamplingParams(temperature=0, max_tokens=4)


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(max_logprobs=8) as engine:
        yield engine


@pytest.fixture(scope="module")
def expected(llm):
    return llm.generate(PROMPTS, GREEDY, use_tqdm=False)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(max_tokens=2**63, min_tokens=2**63), r"max_tokens=9223372036854775808 must be .* < 2\*\*63"),
        (dict(max_tokens=2**63), "max_tokens=9223372036854775808"),
        (dict(n=2**63), r"n=9223372036854775808 must be an integer in \[1, 2\*\*63\)"),
        (dict(logprobs=2**63), "logprobs=9223372036854775808"),
        (dict(stop_token_ids=[5, 2**63]), "stop_token_ids="),
    ],
)
def test_integer_fields_are_bounded_when_built_and_submitted(llm, expected, fields, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**fields)
    changed = SamplingParams(temperature=0, max_tokens=4)
    for name, value in fields.items():
        setattr(changed, name, value)
    with pytest.raises(ValueError, match=message):
        llm.generate(PROMPTS, [GREEDY, changed], use_tqdm=False)
    assert llm.is_finished()
    assert llm.generate(PROMPTS, GREEDY, use_tqdm=False) == expected


def test_logprobs_above_max_logprobs_are_refused_naming_both(llm, expected):
    assert len(llm.generate(PROMPTS, SamplingParams(max_tokens=2, logprobs=8), use_tqdm=False)) == 2
    with pytest.raises(ValueError, match="logprobs=9 .*max_logprobs=8"):
        llm.generate(PROMPTS, SamplingParams(max_tokens=2, logprobs=9), use_tqdm=False)
    assert llm.is_finished()
    assert llm.generate(PROMPTS, GREEDY, use_tqdm=False) == expected


def test_max_logprobs_defaults_to_vllms_20_and_is_checked():
    assert engine_config("tiny").scheduler.max_logprobs == 20
    assert engine_config("tiny", max_logprobs=-1).scheduler.max_logprobs == -1  # no cap
    with pytest.raises(ValueError, match="scheduler.max_logprobs=-2"):
        engine_config("tiny", max_logprobs=-2)


class FullStderr(io.StringIO):
    def write(self, text):
        raise OSError(28, "No space left on device")

    def flush(self):
        raise OSError(28, "No space left on device")


def closed_stderr():
    stderr = io.StringIO()
    stderr.close()
    return stderr


@pytest.mark.parametrize(
    "make_stderr", [FullStderr, closed_stderr, lambda: None], ids=["full", "closed", "none"]
)
def test_the_progress_bar_never_fails_a_call(llm, expected, make_stderr, monkeypatch):
    monkeypatch.setattr(sys, "stderr", make_stderr())
    assert llm.generate(PROMPTS, GREEDY) == expected


def test_a_priority_under_fcfs_warns_once(llm, expected):
    with pytest.warns(UserWarning, match="priority is ignored under scheduler.policy=fcfs"):
        assert llm.generate(PROMPTS, GREEDY, use_tqdm=False, priority=[1, 0]) == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llm.generate(PROMPTS, GREEDY, use_tqdm=False, priority=[1, 0])
        llm.generate(PROMPTS, GREEDY, use_tqdm=False)  # no priority: nothing to warn about
