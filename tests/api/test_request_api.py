"""Stop strings and stop tokens, finish reasons, RequestOutput, streaming and incremental detokenization, and
the new request fields' errors (tiny engine, decode rounds of several steps, overlapped)."""

import pytest

from nvllm import SamplingParams
from nvllm.config import SchedulerConfig
from nvllm.outputs import RequestOutput
from nvllm.scheduler.block_manager import BlockManager
from nvllm.scheduler.scheduler import Scheduler
from nvllm.scheduler.sequence import Sequence
from nvllm.tokenizer.detokenizer import REPLACEMENT_CHARACTER, IncrementalDetokenizer, decode
from tests.helpers.engine_utils import random_prompt, tiny_llm

PROMPTS = [random_prompt(20, seed) for seed in range(3)]
GREEDY = SamplingParams(temperature=0, max_tokens=24)


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(kvcache_block_size=16, num_decode_steps=8) as engine:
        yield engine


@pytest.fixture(scope="module")
def greedy_outputs(llm):
    return llm.generate(PROMPTS, GREEDY, use_tqdm=False)


def test_request_output_reads_as_before_and_says_why_it_finished(llm, greedy_outputs):
    out = greedy_outputs[0]
    assert isinstance(out, RequestOutput) and out.prompt_token_ids == PROMPTS[0]
    (completion,) = out.outputs
    assert out["token_ids"] == completion.token_ids and len(completion.token_ids) == GREEDY.max_tokens
    assert (
        out["text"] == completion.text == llm.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    )
    assert completion.finish_reason == "length" and completion.stop_reason is None
    assert completion.logprobs is None
    metrics = out.metrics
    assert (
        metrics.arrival_time
        <= metrics.first_scheduled_time
        <= metrics.first_token_time
        <= metrics.finished_time
    )
    assert metrics.time_in_queue == metrics.first_scheduled_time - metrics.arrival_time
    with pytest.raises(KeyError, match="prompt"):
        out["prompt"]


def stop_string_across_tokens(llm, token_ids: list[int]) -> tuple[str, int]:
    """A stop string made of the end of one token's text and the start of the next one's, and the number
    of tokens up to the one that completes it."""
    pieces = [decode(llm.tokenizer, [t], skip_special_tokens=True) for t in token_ids]
    for index in range(4, len(pieces) - 1):
        left, right = pieces[index], pieces[index + 1]
        if len(left.strip()) >= 2 and len(right.strip()) >= 2 and REPLACEMENT_CHARACTER not in left + right:
            stop = left[-2:] + right[:2]
            text = decode(llm.tokenizer, token_ids, skip_special_tokens=True)
            if text.find(stop) == len("".join(pieces[:index])) + len(left) - 2:  # its first occurrence
                return stop, index + 2
    raise AssertionError("no two neighbouring tokens with text to span")


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_spanning_tokens_cuts_the_text(llm, greedy_outputs, include):
    base = greedy_outputs[1]
    stop, num_tokens = stop_string_across_tokens(llm, base["token_ids"])
    params = SamplingParams(
        temperature=0, max_tokens=24, stop=["never there", stop], include_stop_str_in_output=include
    )
    (out,) = llm.generate(PROMPTS[1:2], params, use_tqdm=False)
    completion = out.outputs[0]
    cut = base["text"].find(stop) + (len(stop) if include else 0)
    assert completion.text == base["text"][:cut]
    assert completion.token_ids == base["token_ids"][:num_tokens]  # tokens after the stop are discarded
    assert completion.finish_reason == "stop" and completion.stop_reason == stop


def test_stop_token_ids_stop_and_are_kept(llm, greedy_outputs):
    base = greedy_outputs[2]["token_ids"]
    position = next(i for i in range(3, len(base)) if base[i] not in base[:i])
    params = SamplingParams(temperature=0, max_tokens=24, stop_token_ids=[base[position]])
    (out,) = llm.generate(PROMPTS[2:3], params, use_tqdm=False)
    assert out["token_ids"] == base[: position + 1]
    assert out.outputs[0].finish_reason == "stop" and out.outputs[0].stop_reason == base[position]


def test_finish_reasons_of_eos_and_length_in_the_scheduler():
    eos = 7
    scheduler = Scheduler(SchedulerConfig(num_decode_steps=4), BlockManager(8, 16), eos_token_ids=(eos,))
    stops = Sequence([1, 2], SamplingParams(max_tokens=10))
    limited = Sequence([3, 4], SamplingParams(max_tokens=3))
    for seq in (stops, limited):
        scheduler.add(seq)
    batch = scheduler.schedule()
    scheduler.launched(batch)
    scheduler.postprocess(batch, [[5], [5]])
    batch = scheduler.schedule()
    scheduler.launched(batch)
    assert scheduler.postprocess(batch, [[6, eos, 6], [8, 8, 8]]) == [stops, limited]
    assert (stops.finish_reason, stops.stop_reason) == ("stop", None)  # EOS, as vLLM reports it
    assert (limited.finish_reason, limited.stop_reason) == ("length", None)
    assert stops.completion_token_ids == [5, 6, eos] and limited.completion_token_ids == [5, 8, 8]


def streamed(llm, prompts, params) -> dict[tuple[int, int], tuple[list[int], str, str]]:
    """Each sample's concatenated deltas: (token ids, text, finish reason)."""
    result = {}
    for index, delta in llm.stream(prompts, params):
        tokens, text, _ = result.get((index, delta.index), ([], "", None))
        assert delta.token_ids or delta.finish_reason  # no empty updates
        # never half a character (a random model's output also holds invalid bytes: U+FFFD inside the text)
        assert not delta.text.endswith(REPLACEMENT_CHARACTER) or delta.finish_reason
        result[(index, delta.index)] = (tokens + delta.token_ids, text + delta.text, delta.finish_reason)
    return result


def test_streamed_deltas_add_up_to_the_output(llm):
    prompts = [random_prompt(12, seed) for seed in range(10, 16)]
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=30, n=2)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    pieces = [
        decode(llm.tokenizer, [t], skip_special_tokens=True)
        for o in outputs
        for c in o.outputs
        for t in c.token_ids
    ]
    assert any(REPLACEMENT_CHARACTER in piece for piece in pieces)  # characters split across tokens occur
    stream = streamed(llm, prompts, params)
    assert len(stream) == 2 * len(prompts)
    for index, out in enumerate(outputs):
        for completion in out.outputs:
            assert stream[(index, completion.index)] == (completion.token_ids, completion.text, "length")


def test_streamed_text_never_shows_a_stop_string_that_is_cut(greedy_outputs):
    with tiny_llm(kvcache_block_size=16, num_decode_steps=1) as llm:  # a delta after every token
        base = greedy_outputs[1]
        stop, _ = stop_string_across_tokens(llm, base["token_ids"])
        params = SamplingParams(temperature=0, max_tokens=24, stop=stop)
        ((tokens, text, reason),) = streamed(llm, PROMPTS[1:2], params).values()
        (out,) = llm.generate(PROMPTS[1:2], params, use_tqdm=False)
    assert (tokens, text, reason) == (out["token_ids"], out["text"], "stop")


def test_incremental_detokenizer_holds_split_characters(llm):
    text = "naïve café — 世界 🦜🧬 ok"
    token_ids = llm.tokenizer.encode(text)
    assert any(
        REPLACEMENT_CHARACTER in decode(llm.tokenizer, [t], skip_special_tokens=True) for t in token_ids
    )
    detokenizer = IncrementalDetokenizer(llm.tokenizer, skip_special_tokens=True)
    deltas = []
    for token in token_ids:
        detokenizer.add(token)
        deltas.append(detokenizer.new_text())
    assert all(REPLACEMENT_CHARACTER not in delta for delta in deltas)
    assert "".join(deltas) == text
    unfinished = IncrementalDetokenizer(llm.tokenizer, skip_special_tokens=True)
    for token in llm.tokenizer.encode("🦜")[:-1]:  # the output ends inside a character
        unfinished.add(token)
    assert unfinished.new_text() == ""
    unfinished.finish()
    assert unfinished.new_text() == decode(
        llm.tokenizer, llm.tokenizer.encode("🦜")[:-1], skip_special_tokens=True
    )


def test_a_stream_left_early_drops_its_requests(llm, greedy_outputs):
    stream = llm.stream(PROMPTS, GREEDY)
    next(stream)
    with pytest.raises(RuntimeError, match="stream"):  # the same thread would wait for itself
        llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    stream.close()
    assert llm.is_finished()
    assert llm.generate(PROMPTS, GREEDY, use_tqdm=False) == greedy_outputs


BAD_PARAMS = [
    (dict(n=0), "n="),
    (dict(n=1.5), "n="),
    (dict(stop=5), "stop="),
    (dict(stop=["ok", ""]), "stop="),
    (dict(stop_token_ids=[-1]), "stop_token_ids="),
    (dict(stop_token_ids=3), "stop_token_ids="),
    (dict(include_stop_str_in_output="yes"), "include_stop_str_in_output="),
    (dict(min_tokens=-1), "min_tokens="),
    (dict(min_tokens=10, max_tokens=5), "min_tokens="),
    (dict(logprobs=-2), "logprobs="),
    (dict(logprobs=2.0), "logprobs="),
    (dict(presence_penalty=2.5), "presence_penalty="),
    (dict(frequency_penalty=float("nan")), "frequency_penalty="),
    (dict(repetition_penalty=0.0), "repetition_penalty="),
    (dict(repetition_penalty=float("inf")), "repetition_penalty="),
]


@pytest.mark.parametrize("fields, message", BAD_PARAMS)
def test_bad_sampling_fields_name_themselves(fields, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**fields)


@pytest.mark.parametrize(
    "call, message, error",
    [
        (
            lambda llm: llm.generate(PROMPTS, SamplingParams(stop_token_ids=[4096])),
            "stop_token_ids",
            ValueError,
        ),
        (lambda llm: llm.generate(PROMPTS, SamplingParams(logprobs=5000)), "logprobs=5000", ValueError),
        (lambda llm: llm.generate(PROMPTS, SamplingParams(n=600)), "n=600", ValueError),
        (
            lambda llm: llm.generate(PROMPTS, GREEDY, priority=[0, 1]),
            "3 prompts but 2 priorities",
            ValueError,
        ),
        (lambda llm: llm.generate(PROMPTS, GREEDY, priority=[0, 1, "a"]), "priority='a'", TypeError),
        (lambda llm: llm.generate(PROMPTS, GREEDY, priority=5), "priority=5", TypeError),
        (lambda llm: llm.add_request(PROMPTS[0], GREEDY, priority=1.5), "priority=1.5", TypeError),
        (lambda llm: list(llm.stream(PROMPTS, SamplingParams(n=600))), "n=600", ValueError),
    ],
)
def test_bad_requests_are_refused_and_the_engine_serves_the_next(llm, greedy_outputs, call, message, error):
    with pytest.raises(error, match=message):
        call(llm)
    assert llm.is_finished()
    assert llm.generate(PROMPTS, GREEDY, use_tqdm=False) == greedy_outputs
