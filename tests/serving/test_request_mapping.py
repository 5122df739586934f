"""OpenAI request fields onto SamplingParams: each field that exists today; refusals name the field."""

import pytest

from nvllm.sampling_params import SamplingParams, StructuredOutputsParams
from nvllm.serving.request_mapping import sampling_params


def test_completion_fields_map_onto_sampling_params():
    fields = dict(temperature=0.5, top_p=0.9, n=2, seed=7, stop=["\n"], logprobs=3, top_k=4, ignore_eos=True)
    body = {"model": "m", "prompt": "x", "max_tokens": 5, "presence_penalty": 0.5, **fields}
    expected = SamplingParams(max_tokens=5, presence_penalty=0.5, **fields)
    assert sampling_params(body, "completions", default_max_tokens=16) == expected


def test_chat_logprobs_and_max_completion_tokens():
    body = {"messages": [], "logprobs": True, "top_logprobs": 2, "max_completion_tokens": 9, "max_tokens": 3}
    params = sampling_params(body, "chat", default_max_tokens=100)
    assert (params.logprobs, params.max_tokens) == (2, 9)
    assert sampling_params({"messages": [], "logprobs": True}, "chat", 100).logprobs == 0
    assert sampling_params({"messages": []}, "chat", 100) == SamplingParams(max_tokens=100)


@pytest.mark.parametrize(
    "body, words",
    [
        ({"best_of": 2}, "best_of"),
        ({"temperature": -1}, "temperature"),
        ({"n": "two"}, "n="),
        ({"top_logprobs": 2}, "top_logprobs needs logprobs"),
        ({"logprobs": 2}, "must be true or false"),
    ],
)
def test_bad_fields_are_named(body, words):
    with pytest.raises(ValueError, match=words):
        sampling_params({"messages": [], **body}, "chat", 16)


def test_response_format_maps_onto_structured_outputs():
    schema = {"type": "object", "required": ["a"]}
    body = {"messages": [], "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    assert sampling_params(body, "chat", 16).structured_outputs == StructuredOutputsParams(json=schema)
    body = {"messages": [], "response_format": {"type": "json_object"}, "structured_outputs": None}
    assert sampling_params(body, "chat", 16).structured_outputs.json == {"type": "object"}


def test_token_filter_fields_map_onto_sampling_params():
    filters = {"min_p": 0.1, "allowed_token_ids": [1, 2], "bad_words": ["no"]}
    body = {"prompt": "x", "logit_bias": {"7": 100, "12": -5.5}, **filters}
    expected = SamplingParams(max_tokens=16, logit_bias={7: 100.0, 12: -5.5}, **filters)
    assert sampling_params(body, "completions", 16) == expected
    chat = sampling_params({"messages": [], "logit_bias": {"3": -100}}, "chat", 16)
    assert chat.logit_bias == {3: -100.0}


def test_explicit_nulls_take_the_defaults():
    body = {"prompt": "x", "temperature": None, "max_tokens": None, "logit_bias": None, "stop": None}
    assert sampling_params(body, "completions", 16) == SamplingParams(max_tokens=16)


@pytest.mark.parametrize(
    "body, words",
    [
        ({"logit_bias": {"seven": 1}}, "must map token ids to numbers"),
        ({"logit_bias": [7]}, "must be an object"),
        ({"logit_bias": {"7": 101}}, "logit_bias="),
        ({"min_p": 2}, "min_p="),
        ({"allowed_token_ids": []}, "allowed_token_ids="),
        ({"bad_words": [" "]}, "bad_words="),
    ],
)
def test_bad_token_filters_are_named(body, words):
    with pytest.raises(ValueError, match=words):
        sampling_params({"prompt": "x", **body}, "completions", 16)


@pytest.mark.parametrize("field", ["top_logprobs", "messages", "response_format", "max_completion_tokens"])
def test_chat_only_fields_are_unknown_to_completions(field):
    with pytest.raises(ValueError, match=f"unknown request field.*{field}"):
        sampling_params({"prompt": "x", field: 1}, "completions", 16)
