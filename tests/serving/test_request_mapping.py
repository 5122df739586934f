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
