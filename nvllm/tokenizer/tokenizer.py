"""The engine's tokenizer: text to token ids and back, its special tokens and its chat template.

Read with the `tokenizers` library (the Rust tokenizers behind transformers' fast tokenizers) straight from
a checkpoint's files, the way transformers reads them, or built in (Qwen3's, see qwen_vocab.py).
transformers itself is never imported: that alone took seconds of every start.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken

from nvllm.tokenizer import qwen_vocab

# The named special tokens of transformers' tokenizer_config.json, which chat templates also see
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
# Lists of further special tokens: transformers 4 names them `additional_special_tokens`, 5 `extra_...`
EXTRA_SPECIAL_TOKENS = ("additional_special_tokens", "extra_special_tokens")
ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


class Tokenizer:
    """A `tokenizers.Tokenizer` (`backend`) with its named special tokens (`{"eos_token": "<|im_end|>"}`) and
    chat template (a string, or named templates: `{"default": ..., "tool_use": ...}`, or None)."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        special_tokens: dict[str, str],
        chat_template: str | dict[str, str] | None,
    ):
        # Prompts are checked against the model's length, never cut or padded: a tokenizer.json's own
        # truncation or padding settings (as transformers ignores them unless asked) do not apply.
        backend.no_truncation()
        backend.no_padding()
        self.backend = backend
        self.special_tokens = special_tokens
        self.chat_template = chat_template

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The token ids of `text` (`add_special_tokens`: with those the tokenizer's post-processor adds
        around a text, such as a BOS; Qwen's add none)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of `token_ids` (`skip_special_tokens`: without the tokens marked special); spaces are
        never "cleaned up", which would change the text of byte-level BPE."""
        return self.backend.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def __len__(self) -> int:
        """The vocabulary's size, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def _special_id(self, name: str) -> int | None:
        token = self.special_tokens.get(name)
        return None if token is None else self.token_to_id(token)

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens.get("eos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._special_id("eos_token")

    @property
    def pad_token(self) -> str | None:
        return self.special_tokens.get("pad_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._special_id("pad_token")

    @property
    def bos_token(self) -> str | None:
        return self.special_tokens.get("bos_token")

    def apply_chat_template(
        self, conversation: list[dict], add_generation_prompt: bool = False, **variables: Any
    ) -> str:
        """`conversation` rendered by the chat template as text (`add_generation_prompt`: ending in the
        assistant's opened turn); `variables` reach the template (`enable_thinking=False`, `tools=[...]`)."""
        if self.chat_template is None:
            raise ValueError("chat needs a chat template, and this model's tokenizer has none")
        from nvllm.tokenizer.chat_template import (
            render_chat,  # Jinja is imported by the first chat, not by every start
        )

        return render_chat(
            self.chat_template, conversation, self.special_tokens, add_generation_prompt, **variables
        )


def load_tokenizer(path: str | None) -> Tokenizer:
    """The tokenizer in checkpoint dir `path`, or (None) the built-in Qwen3 one."""
    if path is None:
        return Tokenizer(
            builtin_backend(qwen_vocab.cache_file()),
            {"eos_token": qwen_vocab.EOS_TOKEN, "pad_token": qwen_vocab.PAD_TOKEN},
            qwen_vocab.CHAT_TEMPLATE,
        )
    return checkpoint_tokenizer(Path(os.path.expanduser(path)), path)


@functools.cache
def builtin_backend(cache_file: Path) -> tokenizers.Tokenizer:
    """Read once per process (per cache file): engines never modify it."""
    return qwen_vocab.qwen3_tokenizer(cache_file)


def checkpoint_tokenizer(directory: Path, path: str) -> Tokenizer:
    """tokenizer.json, completed by tokenizer_config.json (special tokens, extra added tokens, whether special
    tokens in text are split) and the chat template files, as transformers completes it."""
    file = directory / "tokenizer.json"
    if not file.is_file():
        raise ValueError(
            f"model.path={path!r} has no tokenizer.json (the `tokenizers` file, which transformers' "
            "`AutoTokenizer.from_pretrained(dir).save_pretrained(dir)` writes)"
        )
    try:
        backend = tokenizers.Tokenizer.from_file(str(file))
    except Exception as error:  # tokenizers raises a bare Exception for a file it cannot read
        raise ValueError(f"{file} is not a tokenizer.json that `tokenizers` can read: {error}") from error
    config = _json_object(directory / "tokenizer_config.json")
    legacy_map = _json_object(directory / "special_tokens_map.json")
    special_tokens = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = config.get(name, legacy_map.get(name))
        if value is not None:
            special_tokens[name] = _content(value)
    extra = []
    for key in EXTRA_SPECIAL_TOKENS:  # a list, or (transformers 5) names for them
        tokens = config.get(key) or []
        extra += list(tokens.values() if isinstance(tokens, dict) else tokens)
    _add_missing_tokens(backend, config.get("added_tokens_decoder", {}), [*special_tokens.values(), *extra])
    if config.get("split_special_tokens"):
        backend.encode_special_tokens = True  # special tokens' text in a prompt is encoded as plain text
    return Tokenizer(backend, special_tokens, _chat_templates(directory, config))


def _json_object(file: Path) -> dict:
    if not file.exists():
        return {}
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{file} is not valid JSON: {error}") from error
    if not isinstance(value, dict):
        raise ValueError(f"{file} must hold a JSON object, not {type(value).__name__}")
    return value


def _content(token: str | dict) -> str:
    """A token as tokenizer_config.json gives it: its text, or transformers' serialized AddedToken."""
    return token["content"] if isinstance(token, dict) else token


def _add_missing_tokens(backend: tokenizers.Tokenizer, added_tokens: dict, special: list) -> None:
    """The config's added tokens (with their flags) and special tokens that tokenizer.json lacks, added at
    the end of the vocabulary as transformers adds them; those it has keep their flags."""
    present = {token.content for token in backend.get_added_tokens_decoder().values()}
    missing = []
    for _, token in sorted(added_tokens.items(), key=lambda item: int(item[0])):
        if token["content"] not in present:
            flags = {key: token[key] for key in ADDED_TOKEN_FLAGS if key in token}
            missing.append(AddedToken(token["content"], **flags))
            present.add(token["content"])
    for token in special:
        content = _content(token)
        if content not in present:
            missing.append(AddedToken(content, special=True, normalized=False))
            present.add(content)
    if missing:
        backend.add_tokens(missing)


def _chat_templates(directory: Path, config: dict) -> str | dict[str, str] | None:
    """chat_template.jinja (the default) and additional_chat_templates/NAME.jinja, which take priority over
    tokenizer_config.json's `chat_template` (one template, or a list of named ones)."""
    templates = {}
    if (directory / "chat_template.jinja").is_file():
        templates["default"] = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    for file in sorted((directory / "additional_chat_templates").glob("*.jinja")):
        templates[file.name.removesuffix(".jinja")] = file.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    template = config.get("chat_template")
    if isinstance(template, list):
        return {entry["name"]: entry["template"] for entry in template}
    return template
