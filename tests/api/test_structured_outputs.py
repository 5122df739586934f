"""Structured outputs on a tiny random model (Qwen's whole vocabulary, so that the grammar finds its tokens):
sampled at temperature 1, the outputs parse and validate, match, or are one of the choices — the grammar, not
the model, makes them so — in mixed batches, with n, streaming, stop strings, priority and preemption."""

import dataclasses
import json
import re

import jsonschema
import pytest

from nvllm import LLM, SamplingParams
from nvllm.sampling_params import StructuredOutputsParams
from tests.helpers.engine_utils import SMALL_CPU_KV_CACHE, random_prompt

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
REGEX = r"[0-9]{3}-[a-z]{2,4}"
CHOICES = ["yes", "no", 'maybe "so"']
GRAMMAR = 'start: greeting " " NAME\ngreeting: "hi" | "hello"\nNAME: /[A-Z][a-z]{1,5}/'
PROMPTS = [random_prompt(12, seed) for seed in range(4)]
SETTINGS = dict(enforce_eager=True, kvcache_block_size=16, num_decode_steps=8, **SMALL_CPU_KV_CACHE)


def sampled(constraint, seed: int = 0, **fields) -> SamplingParams:
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=80, structured_outputs=constraint, **fields)


@pytest.fixture(scope="module")
def llm():
    with LLM("tiny", **SETTINGS) as engine:
        yield engine


def is_valid(kind: str, text: str) -> bool:
    if kind == "json":
        try:
            jsonschema.validate(json.loads(text), SCHEMA)
        except (ValueError, jsonschema.ValidationError):
            return False
        return True
    if kind == "regex":
        return re.fullmatch(REGEX, text) is not None
    if kind == "choice":
        return text in CHOICES
    return re.fullmatch(r"(hi|hello) [A-Z][a-z]{1,5}", text) is not None


CONSTRAINTS = {
    "json": {"json": SCHEMA},
    "regex": StructuredOutputsParams(regex=REGEX),
    "choice": {"choice": CHOICES},
    "grammar": {"grammar": GRAMMAR},
}


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_sampled_outputs_follow_their_constraint(llm, kind):
    params = [sampled(CONSTRAINTS[kind], seed) for seed in range(len(PROMPTS))]
    outputs = llm.generate(PROMPTS, params, use_tqdm=False)
    for out in outputs:
        (completion,) = out.outputs
        assert is_valid(kind, completion.text), completion.text
        # ended by the grammar (or an EOS it allowed), not by the token budget
        assert completion.finish_reason == "stop" and completion.stop_reason is None
    if kind == "choice":  # a complete choice ends the output at once: no EOS is sampled after it
        assert all(llm.tokenizer.decode(out["token_ids"]) == out["text"] for out in outputs)


def test_unconstrained_outputs_are_not_valid_by_chance(llm):
    """The oracle above would catch a grammar that is not applied: the model alone makes no valid output."""
    free = [SamplingParams(temperature=1.0, seed=seed, max_tokens=20) for seed in range(len(PROMPTS))]
    for kind in CONSTRAINTS:
        assert not any(is_valid(kind, out["text"]) for out in llm.generate(PROMPTS, free, use_tqdm=False))


def test_free_rows_of_a_mixed_batch_sample_as_without_constrained_ones(llm):
    free = [
        SamplingParams(temperature=1.0, seed=7, max_tokens=30),
        SamplingParams(temperature=0, max_tokens=30),
        SamplingParams(temperature=0.8, seed=8, top_k=50, top_p=0.9, max_tokens=30),
    ]
    alone = llm.generate(PROMPTS[:3], free, use_tqdm=False)
    constrained = [sampled(CONSTRAINTS[kind], seed=3) for kind in CONSTRAINTS]
    mixed = llm.generate(PROMPTS[:3] + PROMPTS, free + constrained, use_tqdm=False)
    assert [out["token_ids"] for out in mixed[:3]] == [out["token_ids"] for out in alone]
    for kind, out in zip(CONSTRAINTS, mixed[3:]):
        assert is_valid(kind, out["text"]), out["text"]


def test_each_of_n_samples_has_its_own_matcher(llm):
    (out,) = llm.generate(PROMPTS[:1], sampled(CONSTRAINTS["json"], seed=5, n=3), use_tqdm=False)
    texts = [completion.text for completion in out.outputs]
    assert len(set(texts)) == 3
    assert all(is_valid("json", text) for text in texts), texts


def test_streamed_text_equals_the_generated_text(llm):
    params = [sampled(CONSTRAINTS[kind], seed=2) for kind in CONSTRAINTS]
    expected = [out["text"] for out in llm.generate(PROMPTS, params, use_tqdm=False)]
    streamed = [""] * len(PROMPTS)
    for index, delta in llm.stream(PROMPTS, params):
        streamed[index] += delta.text
    assert streamed == expected


def test_a_stop_string_cuts_a_structured_output(llm):
    params = sampled({"regex": "abc[0-9]{3}"}, stop="c")
    (out,) = llm.generate(PROMPTS[:1], params, use_tqdm=False)
    assert out["text"] == "ab" and out.outputs[0].stop_reason == "c"


def test_chat_replies_are_one_of_the_choices(llm):
    messages = [{"role": "user", "content": "Is it raining?"}]
    (out,) = llm.chat(messages, sampled({"choice": CHOICES}), use_tqdm=False)
    assert out["text"] in CHOICES


def test_preempted_samples_resume_their_grammar():
    """A tight KV cache preempts sequences mid-output; recomputed, they keep their matchers' state and sample
    what a roomy engine samples (seeded), under the priority policy too."""
    params = [sampled(CONSTRAINTS["json"], seed) for seed in range(len(PROMPTS))]
    priorities = [1, 0, 1, 0]
    with LLM("tiny", **SETTINGS, scheduling_policy="priority") as roomy:
        expected = roomy.generate(PROMPTS, params, use_tqdm=False, priority=priorities)
    with LLM("tiny", **SETTINGS, num_kvcache_blocks=6, scheduling_policy="priority") as tight:
        outputs = tight.generate(PROMPTS, params, use_tqdm=False, priority=priorities)
        assert tight.stats()["num_preemptions"] > 0
    assert [out["token_ids"] for out in outputs] == [out["token_ids"] for out in expected]
    assert all(is_valid("json", out["text"]) for out in outputs)


@pytest.mark.parametrize(
    "constraint, message",
    [
        ({"json": {"type": "nope"}}, "json is invalid: .*nope"),
        ({"json": "{not json"}, "json is not valid JSON"),
        ({"regex": "(ab"}, "(?s)regex is invalid: .*unclosed group"),
        ({"grammar": "start: undefined_rule"}, "(?s)grammar is invalid: .*undefined_rule"),
    ],
)
def test_an_invalid_constraint_is_refused_and_the_engine_serves_the_next(llm, constraint, message):
    good = sampled(CONSTRAINTS["choice"])
    with pytest.raises(ValueError, match=message):  # the engine's check of a request, before any state
        llm.validate(PROMPTS[0], sampled(constraint))
    with pytest.raises(ValueError, match=message):
        llm.generate(PROMPTS[:2], [good, sampled(constraint)], use_tqdm=False)
    assert llm.is_finished()  # the valid request of the call was not queued either
    (out,) = llm.generate(PROMPTS[:1], good, use_tqdm=False)
    assert out["text"] in CHOICES


@pytest.mark.parametrize(
    "constraint, message",
    [
        ({}, "exactly one of json, regex, choice, grammar; got none"),
        ({"json": SCHEMA, "regex": "a"}, r"exactly one .* got \['json', 'regex'\]"),
        ({"jsn": SCHEMA}, r"unknown keys \['jsn'\]"),
        ({"choice": []}, "choice=.* must be a non-empty list of strings"),
        ({"regex": 3}, "regex=3 must be a non-empty string"),
        ("json", "must be None, a StructuredOutputsParams or a dict"),
    ],
)
def test_badly_shaped_structured_outputs_name_the_problem(constraint, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(structured_outputs=constraint)


def test_a_dict_becomes_the_dataclass_and_forks_keep_it():
    params = SamplingParams(structured_outputs={"choice": ("a", "b")}, n=2)
    assert params.structured_outputs == StructuredOutputsParams(choice=["a", "b"])
    assert dataclasses.replace(params, n=1).structured_outputs == params.structured_outputs
