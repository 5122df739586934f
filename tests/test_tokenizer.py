"""The packaged Qwen3 tokenizer against facts that do not come from our own code: token ids known from
Qwen's published tokenizer, ranks in the shipped BPE file, and tiktoken (an independent BPE) on it."""

import base64
import shutil
import unicodedata

import pytest

from nvllm import tokenizer as tk

TEXTS = [
    "Hello, world!",
    "naïve café — 日本語のテキスト, 한국어, Ελληνικά, русский 😀👍🏽",
    "def f(x: int) -> int:\n\treturn x ** 2  # square\r\n\n\n    pass\n",
    "  leading and trailing spaces   ",
    "numbers 1234567890 3.14159 -42",
    '{"key": [1, 2, {"nested": null}]}',
]


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("xdg")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def tok(cache_home):
    assert not tk.cache_dir().exists()
    return tk.load_tokenizer(None)  # builds the cache


def test_cache_location_and_no_leftovers(tok, cache_home):
    assert tk.cache_dir().parent == cache_home / "nvllm"
    assert (tk.cache_dir() / "tokenizer.json").is_file()
    assert [p.name for p in (cache_home / "nvllm").iterdir()] == [tk.cache_dir().name]  # no temp dirs


# Qwen3's added tokens, in id order from 151643 (from Qwen3's tokenizer_config.json).
QWEN3_ADDED = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
]  # fmt: skip


def test_special_token_ids(tok):
    assert tok.convert_ids_to_tokens(list(range(151643, 151669))) == QWEN3_ADDED
    ids = {t: tok.convert_tokens_to_ids(t) for t in tk.SPECIAL + tk.ADDED}
    assert ids["<|endoftext|>"] == 151643
    assert ids["<|im_start|>"] == 151644
    assert ids["<|im_end|>"] == 151645
    assert ids["<tool_call>"] == 151657
    assert ids["<think>"] == 151667
    assert ids["</think>"] == 151668
    assert sorted(ids.values()) == list(range(151643, 151669))
    assert len(tok) == 151669
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 151643
    assert tok.bos_token is None


def test_known_ids(tok):
    # Ranks read straight from the shipped BPE file are the token ids.
    with open(tk.vocab_file(), "rb") as f:
        ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in f)}
    assert len(ranks) == 151643 and sorted(ranks.values()) == list(range(151643))
    assert tok.encode("Hello") == [ranks[b"Hello"]] == [9707]
    assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert tok.encode(" world") == [ranks[b" world"]]
    assert tok.encode("12345") == [ranks[c.encode()] for c in "12345"]  # one token per digit


def test_matches_tiktoken_on_the_same_file(tok):
    tiktoken = pytest.importorskip("tiktoken")
    with open(tk.vocab_file(), "rb") as f:
        ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in f)}
    enc = tiktoken.Encoding("qwen", pat_str=tk.QWEN_PATTERN, mergeable_ranks=ranks, special_tokens={})
    for text in TEXTS:
        assert tok.encode(text) == enc.encode(text)


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_nfc_normalization(tok):
    assert tok.encode("cafe\u0301") == tok.encode(unicodedata.normalize("NFC", "cafe\u0301"))


def test_special_tokens_are_atomic_and_decode(tok):
    ids = tok.encode("<think>\nhmm\n</think>\n\nHi<|im_end|>")
    assert ids[0] == 151667 and 151668 in ids and ids[-1] == 151645
    # As in Qwen3, think tags are plain added tokens: skip_special_tokens keeps them, drops <|im_end|>.
    assert tok.decode(ids, skip_special_tokens=True) == "<think>\nhmm\n</think>\n\nHi"


def test_chat_template(tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    plain = tok.apply_chat_template(messages[1:], tokenize=False)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n"
    # Qwen's ids: 872 "user", 198 "\n", 77091 "assistant"; no BOS is prepended.
    expected = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198]
    assert tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") == expected


def _fail(*args, **kwargs):
    raise AssertionError("the tokenizer was rebuilt instead of loaded from the disk cache")


def test_second_load_is_served_from_disk_cache(tok, monkeypatch):
    monkeypatch.setattr(tk, "TikTokenConverter", _fail)
    monkeypatch.setattr(tk, "build_qwen3_tokenizer", _fail)
    again = tk.load_tokenizer(None)
    assert len(again) == len(tok) and again.eos_token_id == 151645
    assert again.chat_template == tk.CHAT_TEMPLATE
    for text in TEXTS:
        assert again.encode(text) == tok.encode(text)


def test_lost_race_uses_the_winners_cache(tok, tmp_path, monkeypatch):
    # Another process finishes first: our rename fails, and we load its copy and drop our temp dir.
    built = tk.cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    class Racer:
        def save_pretrained(self, out_dir):
            shutil.copytree(built, tk.cache_dir())  # the winner's complete cache appears
            shutil.copytree(built, out_dir, dirs_exist_ok=True)

    monkeypatch.setattr(tk, "build_qwen3_tokenizer", Racer)
    assert tk.load_tokenizer(None).encode("Hello") == [9707]
    assert [p.name for p in (tmp_path / "nvllm").iterdir()] == [tk.cache_dir().name]


def test_path_loads_a_local_dir_and_never_the_hub(tok):
    local = tk.load_tokenizer(str(tk.cache_dir()))
    assert local.encode(TEXTS[1]) == tok.encode(TEXTS[1])
    with pytest.raises((OSError, ValueError)):
        tk.load_tokenizer("nvllm-test/no-such-model")
