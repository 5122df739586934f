"""The incremental detokenizer against `decode` of all the tokens: text grown token by token, a character
split over byte tokens held until it is whole, skipped special tokens complete at once with no text; and a
SentencePiece-style tokenizer's byte tokens that make no character, which never raise."""

import random

import pytest
import tokenizers
from tokenizers import decoders, models

from nvllm.tokenizer.detokenizer import IncrementalDetokenizer, decode
from nvllm.tokenizer.tokenizer import Tokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(None)  # the built-in Qwen vocabulary: byte-level BPE


def byte_token_ids(tok, data: bytes) -> list[int]:
    """One token per byte: byte-level BPE's base tokens (GPT-2's printable stand-in for each byte)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    stand_in, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            stand_in[byte] = chr(byte)
        else:
            stand_in[byte], extra = chr(256 + extra), extra + 1
    return [tok.token_to_id(stand_in[byte]) for byte in data]


def streamed(detokenizer: IncrementalDetokenizer, token_ids: list[int]) -> list[tuple[str, int]]:
    """Each add's new text and the tokens whose text has gone out, then the end's."""
    out = []
    for token_id in token_ids:
        detokenizer.add(token_id)
        out.append((detokenizer.new_text(), detokenizer.num_streamed_tokens))
    detokenizer.finish()
    out.append((detokenizer.new_text(), len(token_ids)))
    return out


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_random_tokens_stream_to_the_text_of_all(tok, skip_special_tokens):
    rng = random.Random(0)
    token_ids = [rng.randrange(len(tok)) for _ in range(3000)]  # byte tokens and special ones among them
    detokenizer = IncrementalDetokenizer(tok, skip_special_tokens=skip_special_tokens)
    text = "".join(delta for delta, _ in streamed(detokenizer, token_ids))
    assert text == decode(tok, token_ids, skip_special_tokens) == detokenizer.text


def test_a_character_split_over_byte_tokens_is_held_until_whole(tok):
    crab = byte_token_ids(tok, "🦀".encode())  # four byte tokens, one character
    hello = tok.encode("hi")
    detokenizer = IncrementalDetokenizer(tok, skip_special_tokens=True)
    deltas = streamed(detokenizer, hello + crab + hello)
    n = len(hello)
    assert deltas[n - 1] == ("hi", n)
    assert deltas[n : n + 3] == [("", n)] * 3  # the first three bytes: nothing yet
    assert deltas[n + 3] == ("🦀", n + 4)  # the fourth completes it
    # cut short inside the character: the end releases what was held, as decode gives it
    detokenizer = IncrementalDetokenizer(tok, skip_special_tokens=True)
    assert "".join(d for d, _ in streamed(detokenizer, hello + crab[:2])) == decode(
        tok, hello + crab[:2], True
    )


def test_a_skipped_special_token_completes_at_once_with_no_text(tok):
    hello, eos = tok.encode("hi"), tok.eos_token_id
    detokenizer = IncrementalDetokenizer(tok, skip_special_tokens=True)
    deltas = streamed(detokenizer, [*hello, eos, *hello])
    n = len(hello)
    assert deltas[n] == ("", n + 1)  # its token goes out with the text before it, adding none
    assert deltas[-2] == ("hi", 2 * n + 1)
    # after an unfinished character it waits with it
    crab = byte_token_ids(tok, "🦀".encode())
    detokenizer = IncrementalDetokenizer(tok, skip_special_tokens=True)
    deltas = streamed(detokenizer, [*crab[:2], eos, *crab[2:]])
    assert deltas[2] == ("", 0) and deltas[-2] == ("🦀", 5)


def test_stop_strings_cut_the_text(tok):
    token_ids = tok.encode("one two three four")
    detokenizer = IncrementalDetokenizer(tok, ["three"], skip_special_tokens=True)
    stopped_at = next(i for i, token_id in enumerate(token_ids) if detokenizer.add(token_id))
    assert stopped_at == len(tok.encode("one two three")) - 1
    assert detokenizer.text == "one two " and detokenizer.stop_reason == "three"


def sentencepiece_style_tokenizer() -> Tokenizer:
    """A tokenizer as Llama 2's and Mistral's tokenizer.json describe theirs: pieces with "▁" for a space,
    bytes as <0xNN> tokens (byte fallback), the decoded text's first space stripped."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{byte:02X}>": 3 + byte for byte in range(256)}}
    for piece in ["▁Hello", "▁world", "▁", "▁the", "!", "é"]:
        vocab[piece] = len(vocab)
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    backend.add_special_tokens([tokenizers.AddedToken("<s>", special=True), tokenizers.AddedToken("</s>")])
    return Tokenizer(backend, {}, None)


def test_byte_fallback_tokens_that_make_no_character_never_raise():
    # a random-weight model's tokens: bytes that make no UTF-8 character, whose window's text stops
    # starting with the text before it (the decode stream then raises; the windows are decoded here)
    tok = sentencepiece_style_tokenizer()
    rng = random.Random(1)
    for _ in range(50):
        token_ids = [rng.randrange(len(tok)) for _ in range(40)]
        detokenizer = IncrementalDetokenizer(tok, skip_special_tokens=True)
        text = "".join(delta for delta, _ in streamed(detokenizer, token_ids))
        assert text == detokenizer.text
    # whole characters through the same tokenizer: the text of all the tokens
    hello, world = tok.token_to_id("▁Hello"), tok.token_to_id("▁world")
    token_ids = [hello, *byte_fallback_ids(tok, "🦀é".encode()), world]
    detokenizer = IncrementalDetokenizer(tok, skip_special_tokens=True)
    assert "".join(delta for delta, _ in streamed(detokenizer, token_ids)) == "Hello🦀é world"


def byte_fallback_ids(tok: Tokenizer, data: bytes) -> list[int]:
    return [tok.token_to_id(f"<0x{byte:02X}>") for byte in data]
