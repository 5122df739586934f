"""vLLM's stop semantics: a stop token's text is not in the output (its id is), of several stop strings
completing in one token the one that ends first wins, `min_tokens` holds stop strings back up to and
including its last token, and a stream's deltas carry token ids and text in step."""

import pytest

from nvllm import SamplingParams
from nvllm.tokenizer.detokenizer import decode
from tests.api.test_request_api import stop_string_across_tokens
from tests.helpers.engine_utils import random_prompt, tiny_llm

PROMPTS = [random_prompt(20, seed) for seed in range(3)]
GREEDY = SamplingParams(temperature=0, max_tokens=24)
NEVER = "never there, not in any output"  # a long stop string: streaming holds text back for it


@pytest.fixture(scope="module")
def llm():
    with tiny_llm(kvcache_block_size=16, num_decode_steps=8) as engine:
        yield engine


@pytest.fixture(scope="module")
def base(llm):
    return [out.outputs[0] for out in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def first_new_token(token_ids: list[int], start: int = 3) -> int:
    """The position of a token that does not occur before it."""
    return next(i for i in range(start, len(token_ids)) if token_ids[i] not in token_ids[:i])


def streamed(llm, prompt, params) -> list:
    return [delta for _, delta in llm.stream([prompt], params)]


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("stop_strings", [None, [NEVER]])
def test_a_stop_token_ids_text_is_not_in_the_output(llm, base, include, stop_strings):
    tokens = base[2].token_ids
    position = first_new_token(tokens)
    params = SamplingParams(
        temperature=0,
        max_tokens=24,
        stop=stop_strings,
        stop_token_ids=[tokens[position]],
        include_stop_str_in_output=include,  # concerns stop strings only
    )
    (out,) = llm.generate(PROMPTS[2:3], params, use_tqdm=False)
    completion = out.outputs[0]
    assert completion.token_ids == tokens[: position + 1]  # the stop token's id is kept
    assert completion.text == decode(llm.tokenizer, tokens[:position], skip_special_tokens=True)
    assert "".join(delta.text for delta in streamed(llm, PROMPTS[2], params)) == completion.text


def test_eos_text_is_not_in_the_output(base):
    tokens = base[0].token_ids
    position = first_new_token(tokens)
    with tiny_llm(kvcache_block_size=16, num_decode_steps=8, model__eos_token_id=tokens[position]) as llm:
        (out,) = llm.generate(PROMPTS[:1], GREEDY, use_tqdm=False)
        deltas = streamed(llm, PROMPTS[0], GREEDY)
    completion = out.outputs[0]
    assert (completion.finish_reason, completion.stop_reason) == ("stop", None)
    assert completion.token_ids == tokens[: position + 1]
    assert completion.text == decode(llm.tokenizer, tokens[:position], skip_special_tokens=True)
    assert "".join(delta.text for delta in deltas) == completion.text


def two_stops_in_one_token(llm, token_ids: list[int]) -> tuple[str, str, int] | None:
    """Stop strings that both complete at token `index`: one starting in the token before and ending at
    its end, one starting later (the token's first two characters) and ending earlier."""
    pieces = [decode(llm.tokenizer, [t], skip_special_tokens=True) for t in token_ids]
    text = decode(llm.tokenizer, token_ids, skip_special_tokens=True)
    for index in range(1, len(pieces)):
        before, piece = pieces[index - 1], pieces[index]
        start = len("".join(pieces[:index]))
        if len(before) < 2 or len(piece) < 3 or "\ufffd" in before + piece:
            continue
        starts_first, ends_first = before[-2:] + piece, piece[:2]
        if text.find(starts_first) == start - 2 and text.find(ends_first) == start:
            return starts_first, ends_first, index
    return None


@pytest.mark.parametrize("include", [False, True])
def test_of_stop_strings_completing_in_one_token_the_one_that_ends_first_stops(llm, base, include):
    found = [(seq, two_stops_in_one_token(llm, seq.token_ids)) for seq in base]
    row, (seq, (starts_first, ends_first, index)) = next((r, f) for r, f in enumerate(found) if f[1])
    params = SamplingParams(
        temperature=0, max_tokens=24, stop=[starts_first, ends_first], include_stop_str_in_output=include
    )
    (out,) = llm.generate(PROMPTS[row : row + 1], params, use_tqdm=False)
    completion = out.outputs[0]
    end = seq.text.find(ends_first) + (len(ends_first) if include else 0)
    assert completion.text == seq.text[:end]
    assert completion.token_ids == seq.token_ids[: index + 1]
    assert completion.stop_reason == ends_first


def test_min_tokens_holds_a_stop_string_back_on_its_last_token(llm, base):
    stop, num_tokens = stop_string_across_tokens(llm, base[1].token_ids)  # completed by token num_tokens
    early = SamplingParams(temperature=0, max_tokens=24, stop=stop, min_tokens=num_tokens - 1)
    (out,) = llm.generate(PROMPTS[1:2], early, use_tqdm=False)
    assert out.outputs[0].token_ids == base[1].token_ids[:num_tokens]
    held = SamplingParams(temperature=0, max_tokens=24, stop=stop, min_tokens=num_tokens)
    (out,) = llm.generate(PROMPTS[1:2], held, use_tqdm=False)
    completion = out.outputs[0]
    assert completion.token_ids[:num_tokens] == base[1].token_ids[:num_tokens]
    assert len(completion.token_ids) > num_tokens  # vLLM checks stop strings only past min_tokens
    assert completion.text.startswith(base[1].text[: base[1].text.find(stop) + len(stop)])


@pytest.mark.parametrize("row", range(3))
def test_a_deltas_token_ids_and_text_stay_in_step(llm, row):
    params = SamplingParams(temperature=1.0, seed=row, max_tokens=40, stop=NEVER)
    (out,) = llm.generate(PROMPTS[row : row + 1], params, use_tqdm=False)
    tokens, text = [], ""
    for delta in streamed(llm, PROMPTS[row], params):
        tokens, text = tokens + delta.token_ids, text + delta.text
        if delta.finish_reason is None:
            # the text of exactly the tokens handed out, though a possible stop string holds text back
            assert decode(llm.tokenizer, tokens, skip_special_tokens=True) == text
    assert (tokens, text) == (out.outputs[0].token_ids, out.outputs[0].text)
