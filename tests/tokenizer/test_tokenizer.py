"""The tokenizer, read without transformers, against transformers as the oracle (the built-in Qwen3 one and
a checkpoint's files), and the built-in one against facts that do not come from our code: token ids known
from Qwen's published tokenizer, ranks in the shipped BPE file, and tiktoken (an independent BPE) on it."""

import base64
import json
import os
import subprocess
import sys
import unicodedata
from unittest import mock

import pytest
from tokenizers import AddedToken, normalizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter

from nvllm.tokenizer import qwen_vocab as qt
from nvllm.tokenizer import tokenizer as tk
from tests.helpers.checkpoints import save_with_transformers

TEXTS = [
    "Hello, world!",
    "naïve café — 日本語のテキスト, 한국어, Ελληνικά, русский 😀👍🏽",
    "def f(x: int) -> int:\n\treturn x ** 2  # square\r\n\n\n    pass\n",
    "  leading and trailing spaces   ",
    "numbers 1234567890 3.14159 -42",
    '{"key": [1, 2, {"nested": null}]}',
]
# special and added tokens inside text, next to words, spaces and multi-byte characters
SPECIAL_TEXTS = [
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nhmm 🤔\n</think>\n\nHi<|im_end|><|endoftext|>",
    "a<|im_end|>b <tool_call>{}</tool_call> <|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>",
    "<|im_end |> <|IM_END|> <|im_end|",  # near misses: plain text
    "cafe\u0301 ﬁ Å",  # NFC-normalized
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!", "tool_calls": None},
        {"role": "user", "content": "2+2? 日本語"},
    ],
    [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Call the tool."},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "22 °C"},
        {"role": "assistant", "content": "Sunny, 22 °C.", "tool_calls": None},
    ],
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "reasoning": "greet"}],
]


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("xdg")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def tok(cache_home):
    assert not qt.cache_file().exists()
    return tk.load_tokenizer(None)  # builds the cache


@pytest.fixture(scope="module")
def hf_builtin():
    """The built-in tokenizer as transformers builds it: its tiktoken converter on the same file, Qwen3's
    added tokens, as a fast tokenizer with Qwen3's special tokens and template."""
    conv = TikTokenConverter(
        str(qt.vocab_file()), qt.QWEN_PATTERN, additional_special_tokens=[], extra_special_tokens=[]
    )
    with mock.patch.dict(os.environ, {"TIKTOKEN_CACHE_DIR": ""}):  # never tiktoken's stale /tmp copy
        backend = conv.converted()
    backend.normalizer = normalizers.NFC()
    for content in qt.SPECIAL + qt.ADDED:
        token = AddedToken(content, special=content in qt.SPECIAL, normalized=False)
        (backend.add_special_tokens if content in qt.SPECIAL else backend.add_tokens)([token])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=qt.CHAT_TEMPLATE,
    )


def test_cache_location_and_no_leftovers(tok, cache_home):
    assert qt.cache_file().parent == cache_home / "nvllm"
    assert qt.cache_file().is_file()
    assert [p.name for p in (cache_home / "nvllm").iterdir()] == [qt.cache_file().name]  # no temp files


def test_builtin_is_the_tokenizer_transformers_converts(tok, hf_builtin):
    # the same tokenizer.json, byte for byte: vocabulary, merges and their order, pipeline, added tokens
    ours, theirs = tok.backend.to_str(), hf_builtin.backend_tokenizer.to_str()
    first_difference = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    assert first_difference is None and len(ours) == len(theirs), ours[first_difference:][:200]


def assert_same_tokenizer(ours: tk.Tokenizer, hf, conversations, **chat_variables):
    """Encoding, decoding (special tokens kept and skipped), special tokens and chats equal transformers'."""
    assert len(ours) == len(hf)
    assert ours.eos_token == hf.eos_token and ours.eos_token_id == hf.eos_token_id
    assert ours.pad_token_id == hf.pad_token_id and ours.bos_token == hf.bos_token
    for text in TEXTS + SPECIAL_TEXTS:
        for add_special_tokens in (True, False):
            ids = ours.encode(text, add_special_tokens=add_special_tokens)
            assert ids == hf.encode(text, add_special_tokens=add_special_tokens), text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)
        # prefixes that end inside a multi-byte character decode to U+FFFD alike
        for end in range(1, len(ids)):
            assert ours.decode(ids[:end]) == hf.decode(ids[:end], clean_up_tokenization_spaces=False)
    ids = list(range(len(ours) - 40, len(ours))) + [0, 198, 9707]  # the added tokens, all of them
    assert ours.decode(ids) == hf.decode(ids) and ours.decode(ids, True) == hf.decode(
        ids, skip_special_tokens=True
    )
    assert [ours.id_to_token(i) for i in ids] == hf.convert_ids_to_tokens(ids)
    for conversation in conversations:
        for add_generation_prompt in (False, True):
            text = ours.apply_chat_template(conversation, add_generation_prompt, **chat_variables)
            expected = hf.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=add_generation_prompt, **chat_variables
            )
            assert text == expected


@pytest.mark.parametrize("thinking", [{}, {"enable_thinking": False}, {"enable_thinking": True}])
def test_builtin_matches_transformers(tok, hf_builtin, thinking):
    assert_same_tokenizer(tok, hf_builtin, CONVERSATIONS, **thinking)


@pytest.fixture(scope="module")
def saved_dir(tok, tmp_path_factory):
    """The built-in tokenizer's files as transformers 5 saves them (chat_template.jinja beside the config)."""
    directory = tmp_path_factory.mktemp("saved")
    save_with_transformers(tok, directory)
    return directory


def test_a_checkpoints_files_read_as_transformers_reads_them(saved_dir):
    ours, hf = tk.load_tokenizer(str(saved_dir)), AutoTokenizer.from_pretrained(str(saved_dir))
    assert ours.chat_template == qt.CHAT_TEMPLATE
    assert_same_tokenizer(ours, hf, CONVERSATIONS, enable_thinking=False)


# A template using what transformers' environment offers: trim/lstrip blocks, loop controls, a generation
# block, tojson (non-ASCII kept, indent), raise_exception, the special tokens' names and extra variables
HUB_TEMPLATE = """\
{{ bos_token or '' }}{% if tools %}<tools>{{ tools | tojson(indent=1) }}</tools>
{% endif %}
{% for message in messages %}
    {% if message.role not in ['system', 'user', 'assistant'] %}
        {{ raise_exception('unknown role ' + message.role) }}
    {% endif %}
    {% if loop.index0 > 5 %}{% break %}{% endif %}
<|im_start|>{{ message.role }}
{% if message.role == 'assistant' %}{% generation %}{{ message.content }}{% endgeneration %}{% else %}\
{{ message.content | tojson }}{% endif %}{{ '[calls]' if message.tool_calls is defined }}{{ eos_token }}
{% endfor %}
{% if add_generation_prompt %}<|im_start|>assistant
{% if greeting is defined %}{{ greeting }}{% endif %}{% endif %}"""
TOOLS = [{"type": "function", "function": {"name": "météo", "parameters": {"city": {"type": "string"}}}}]


@pytest.fixture(scope="module")
def hub_dir(saved_dir, tmp_path_factory):
    """Qwen3's layout on the hub (transformers 4's files): the template and added tokens inside
    tokenizer_config.json, `Qwen2Tokenizer` as its class, a special token tokenizer.json lacks, and a
    tokenizer.json that asks to truncate."""
    directory = tmp_path_factory.mktemp("hub")
    backend = json.loads((saved_dir / "tokenizer.json").read_text())
    backend["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
    (directory / "tokenizer.json").write_text(json.dumps(backend))
    added = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in backend["added_tokens"]}
    config = {
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|new_special|>"],
        "bos_token": None,
        "chat_template": HUB_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


@pytest.mark.parametrize("variables", [{}, {"tools": TOOLS, "greeting": "Bonjour ☀"}])
def test_a_hub_checkpoints_files_read_as_transformers_reads_them(hub_dir, variables):
    ours, hf = tk.load_tokenizer(str(hub_dir)), AutoTokenizer.from_pretrained(str(hub_dir))
    assert ours.token_to_id("<|new_special|>") == hf.convert_tokens_to_ids("<|new_special|>") == 151669
    assert ours.encode("a <|new_special|>") == hf.encode("a <|new_special|>")
    assert ours.decode(ours.encode("a <|new_special|>"), skip_special_tokens=True) == "a "
    assert len(ours.encode(TEXTS[1])) > 8  # not truncated
    conversations = [c for c in CONVERSATIONS if all(m["role"] != "tool" for m in c)]
    assert_same_tokenizer(ours, hf, conversations, **variables)
    with pytest.raises(Exception, match="unknown role tool"):
        hf.apply_chat_template(CONVERSATIONS[2], tokenize=False)
    with pytest.raises(Exception, match="unknown role tool"):
        ours.apply_chat_template(CONVERSATIONS[2])


def test_split_special_tokens_encodes_their_text_as_text(hub_dir, tmp_path):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((hub_dir / name).read_bytes())
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "split_special_tokens": True}))
    ours, hf = tk.load_tokenizer(str(tmp_path)), AutoTokenizer.from_pretrained(str(tmp_path))
    for text in SPECIAL_TEXTS:
        assert ours.encode(text) == hf.encode(text)
    assert 151645 not in ours.encode(SPECIAL_TEXTS[0])


def test_named_templates_pick_default_or_tool_use(saved_dir, tmp_path):
    directory = tmp_path / "named"
    directory.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (directory / name).write_bytes((saved_dir / name).read_bytes())
    (directory / "additional_chat_templates").mkdir()
    (directory / "additional_chat_templates" / "tool_use.jinja").write_text("tools: {{ tools | tojson }}")
    ours, hf = tk.load_tokenizer(str(directory)), AutoTokenizer.from_pretrained(str(directory))
    assert sorted(ours.chat_template) == sorted(hf.chat_template) == ["default", "tool_use"]
    for tools in (None, TOOLS):
        expected = hf.apply_chat_template(CONVERSATIONS[0], tools=tools, tokenize=False)
        assert ours.apply_chat_template(CONVERSATIONS[0], tools=tools) == expected


def test_known_ids(tok):
    # Ranks read straight from the shipped BPE file are the token ids.
    with open(qt.vocab_file(), "rb") as f:
        ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in f)}
    assert len(ranks) == 151643 and sorted(ranks.values()) == list(range(151643))
    assert tok.encode("Hello") == [ranks[b"Hello"]] == [9707]
    assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert tok.encode(" world") == [ranks[b" world"]]
    assert tok.encode("12345") == [ranks[c.encode()] for c in "12345"]  # one token per digit


# Qwen3's added tokens, in id order from 151643 (from Qwen3's tokenizer_config.json).
QWEN3_ADDED = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
]  # fmt: skip


def test_special_token_ids(tok):
    assert [tok.id_to_token(i) for i in range(151643, 151669)] == QWEN3_ADDED
    assert tok.token_to_id("<|im_end|>") == 151645 and tok.token_to_id("</think>") == 151668
    assert len(tok) == 151669
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 151643
    assert tok.bos_token is None


def test_matches_tiktoken_on_the_same_file(tok):
    tiktoken = pytest.importorskip("tiktoken")
    with open(qt.vocab_file(), "rb") as f:
        ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in f)}
    enc = tiktoken.Encoding("qwen", pat_str=qt.QWEN_PATTERN, mergeable_ranks=ranks, special_tokens={})
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
    text = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.apply_chat_template(messages[1:]) == "<|im_start|>user\nhi<|im_end|>\n"
    # Qwen's ids: 872 "user", 198 "\n", 77091 "assistant"; no BOS is prepended.
    expected = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198]
    assert tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") == expected


def _fail(*args, **kwargs):
    raise AssertionError("the tokenizer was rebuilt instead of loaded from the disk cache")


def test_second_load_is_served_from_disk_cache(tok, monkeypatch):
    monkeypatch.setattr(qt, "build_qwen3_tokenizer", _fail)
    tk.builtin_backend.cache_clear()
    again = tk.load_tokenizer(None)
    assert again.backend is not tok.backend
    assert hash(again.backend.to_str()) == hash(tok.backend.to_str())
    assert again.chat_template == qt.CHAT_TEMPLATE and again.eos_token_id == 151645


def test_a_build_that_fails_midway_leaves_no_file(tmp_path, monkeypatch):
    class HalfWritten:
        def save(self, path):
            with open(path, "w") as f:
                f.write('{"version": "1.0", "trunc')
            raise OSError("disk full")

    monkeypatch.setattr(qt, "build_qwen3_tokenizer", HalfWritten)
    with pytest.raises(OSError, match="disk full"):
        qt.qwen3_tokenizer(tmp_path / "nvllm" / "tokenizer.json")
    assert list((tmp_path / "nvllm").iterdir()) == []  # no half file for the next start to read


def test_racing_first_starts_each_read_a_whole_file(tmp_path):
    # Two processes on a machine without the cache build it at once: each reads a complete file (its own or
    # the other's) and no temporary file is left behind.
    code = (
        "from nvllm.tokenizer.tokenizer import load_tokenizer; "
        "print(load_tokenizer(None).encode('Hello, world!'))"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err.decode()
        assert out.decode().strip() == "[9707, 11, 1879, 0]"
    assert [p.name for p in (tmp_path / "nvllm").iterdir()] == [qt.cache_file().name]


def test_a_bad_tokenizer_dir_is_a_clear_error(saved_dir, tmp_path):
    with pytest.raises(ValueError, match="has no tokenizer.json"):
        tk.load_tokenizer("nvllm-test/no-such-model")  # never the hub
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="tokenizer.json is not a tokenizer.json"):
        tk.load_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer.json").write_bytes((saved_dir / "tokenizer.json").read_bytes())
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer_config.json is not valid JSON"):
        tk.load_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer_config.json").write_text("{}")
    without_template = tk.load_tokenizer(str(tmp_path))
    assert without_template.encode("Hello") == [9707] and without_template.eos_token is None
    with pytest.raises(ValueError, match="has none"):
        without_template.apply_chat_template(CONVERSATIONS[0])


def test_an_engine_starts_and_generates_from_text_without_transformers(tok, tiny_checkpoint):
    # the built-in tokenizer and a checkpoint's: text prompts, stop strings, chat; transformers never loaded
    code = f"""
import sys
from nvllm import LLM, SamplingParams
params = SamplingParams(temperature=0, max_tokens=4, stop=["zzz"])
for model in ("tiny", {str(tiny_checkpoint)!r}):
    with LLM(model, enforce_eager=True, kvcache_block_size=16, max_model_len=128) as llm:
        assert llm.generate(["Hello, 世界"], params, use_tqdm=False)[0]["token_ids"]
        assert llm.chat([{{"role": "user", "content": "hi"}}], params, use_tqdm=False)[0]["token_ids"]
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "transformers")
sys.exit(f"imported {{loaded[:5]}}" if loaded else 0)
"""
    env = {**os.environ, "XDG_CACHE_HOME": str(qt.cache_file().parent.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
