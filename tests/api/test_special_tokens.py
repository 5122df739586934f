"""Special tokens in completions' text: left out by default (`skip_special_tokens=True`, vLLM's default) in
`text`, streamed deltas and stop-string matching, kept when asked; `detokenize=False` gives token ids only.
The oracle is transformers' own tokenizer of the test checkpoint."""

import pytest
from transformers import AutoTokenizer

from nvllm import SamplingParams
from nvllm.engine.request_outputs import StreamCursor, attach_detokenizer, request_output
from nvllm.scheduler.sequence import Sequence, SequenceStatus
from nvllm.scheduler.stops import STOP, StopChecker
from nvllm.tokenizer.tokenizer import load_tokenizer
from tests.helpers.engine_utils import tiny_llm

PROMPT = [9707, 11]
REPLY = "<think>\nhm\n</think>\n\nHello<|im_end|><|im_start|>user\n world 🦜<|endoftext|>"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(None)


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(str(tiny_checkpoint))


def completed(tokenizer, token_ids: list[int], params: SamplingParams) -> tuple[Sequence, list[str]]:
    """A sequence given `token_ids` one at a time as the engine gives them, and the text of each delta a
    stream would hand out."""
    seq = Sequence(PROMPT, params)
    attach_detokenizer(seq, tokenizer)
    cursor, deltas = StreamCursor(seq, 0), []
    for index, token in enumerate(token_ids):
        seq.token_ids.append(token)
        if index == len(token_ids) - 1:
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "length"
        if (delta := cursor.delta()) is not None:
            deltas.append(delta.text)
    return seq, deltas


@pytest.mark.parametrize("skip", [True, False])
def test_text_and_stream_leave_special_tokens_out_by_default(tokenizer, hf_tokenizer, skip):
    token_ids = tokenizer.encode(REPLY)
    assert tokenizer.token_to_id("<|im_end|>") in token_ids
    params = SamplingParams() if skip else SamplingParams(skip_special_tokens=False)
    seq, deltas = completed(tokenizer, token_ids, params)
    text = request_output([seq], tokenizer).outputs[0].text
    assert text == "".join(deltas) == hf_tokenizer.decode(token_ids, skip_special_tokens=skip)
    assert ("<|im_end|>" in text) is not skip and "<think>" in text  # <think> is an added, not special, token
    plain = Sequence(PROMPT, params)  # decoded at once, without a detokenizer following it
    plain.token_ids.extend(token_ids)
    assert request_output([plain], tokenizer).outputs[0].text == text


@pytest.mark.parametrize("skip, stops_at", [(True, 3), (False, None)])
def test_stop_strings_match_the_text_without_special_tokens(tokenizer, skip, stops_at):
    token_ids = tokenizer.encode("Hello<|im_start|> world again")
    assert len(token_ids) == 4
    seq = Sequence(PROMPT, SamplingParams(stop="Hello world", skip_special_tokens=skip))
    attach_detokenizer(seq, tokenizer)
    expected = (stops_at, (STOP, "Hello world")) if skip else (4, None)
    assert StopChecker(tokenizer.eos_token_id, max_model_len=100).take(seq, token_ids) == expected


def test_detokenize_false_returns_token_ids_only():
    params = SamplingParams(temperature=0, max_tokens=8)
    with tiny_llm() as llm:
        (text_out,) = llm.generate([[97, 11]], params, use_tqdm=False)
        silent = SamplingParams(temperature=0, max_tokens=8, detokenize=False)
        (ids_out,) = llm.generate([[97, 11]], silent, use_tqdm=False)
        streamed = list(llm.stream([[97, 11]], silent))
    assert text_out.outputs[0].text and ids_out.outputs[0].text == ""
    assert ids_out.outputs[0].token_ids == text_out.outputs[0].token_ids
    assert [t for _, delta in streamed for t in delta.token_ids] == text_out.outputs[0].token_ids
    assert all(delta.text == "" for _, delta in streamed) and streamed[-1][1].finish_reason == "length"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"skip_special_tokens": 1}, "skip_special_tokens=1 must be True or False"),
        ({"spaces_between_special_tokens": None}, "spaces_between_special_tokens"),
        ({"detokenize": False, "stop": "x"}, "detokenize=False"),
    ],
)
def test_bad_text_settings_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**fields)
