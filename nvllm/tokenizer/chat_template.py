"""Chat templates rendered as transformers' `apply_chat_template` renders them, without importing it.

Checkpoints' templates are written against transformers' Jinja environment: sandboxed, `trim_blocks` and
`lstrip_blocks`, loop controls, a `{% generation %}` block (marks the assistant's text; rendered as is),
the `raise_exception` and `strftime_now` globals and a `tojson` filter that keeps non-ASCII text and takes
`indent`/`separators`/`sort_keys`. They see `messages`, `tools`, `documents`, `add_generation_prompt`, the
named special tokens (`bos_token`, `eos_token`, ...) and the caller's extra variables (`enable_thinking`).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Older names of a message's reasoning: templates read `reasoning_content`, gpt-oss's read `thinking`.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: the body, rendered in place."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: jinja2.runtime.Macro) -> str:
        return caller()


def raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def tojson(
    value: Any, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False
) -> str:
    # Jinja's own filter escapes HTML characters, which would change what the model reads
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@functools.lru_cache(maxsize=16)
def compiled(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)


def template_messages(conversation: list[dict]) -> list[dict]:
    """The messages as templates see them: keys whose value is None dropped (templates test for a key, and
    would render "None"), and a reasoning given under an older name copied to the names templates read."""
    messages = []
    for message in conversation:
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in REASONING_FIELDS if key in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        messages.append(message)
    return messages


def select_template(templates: str | dict[str, str], tools: list | None) -> str:
    """A tokenizer's one template, or of its named ones the tool-use template when tools are given (where
    there is one) and else the default."""
    if isinstance(templates, str):
        return templates
    if tools is not None and "tool_use" in templates:
        return templates["tool_use"]
    if "default" in templates:
        return templates["default"]
    raise ValueError(f"the tokenizer has chat templates {sorted(templates)} and none is named 'default'")


def render_chat(
    templates: str | dict[str, str],
    conversation: list[dict],
    special_tokens: dict[str, str],
    add_generation_prompt: bool = False,
    tools: list[dict] | None = None,
    documents: list[dict] | None = None,
    **variables: Any,
) -> str:
    """One conversation rendered as text; `variables` override the special tokens' names."""
    if tools is not None and not all(isinstance(tool, dict) for tool in tools):
        raise ValueError("tools must be JSON schemas (dicts)")
    if documents is not None and not all(isinstance(document, dict) for document in documents):
        raise ValueError("documents must be dicts with 'title' and 'text' keys")
    return compiled(select_template(templates, tools)).render(
        messages=template_messages(conversation),
        tools=tools,
        documents=documents,
        add_generation_prompt=add_generation_prompt,
        **{**special_tokens, **variables},
    )
