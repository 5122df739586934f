"""Conversations as prompts: rendered by the tokenizer's chat template, with the assistant's turn opened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvllm.tokenizer.tokenizer import Tokenizer


def conversations_of(messages: Any) -> list[list[dict]]:
    """One conversation (a list of `{"role", "content"}` messages) or a list of them, as a list of them."""
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        messages = [messages]
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError(
            "messages must be a conversation (a list of {'role', 'content'} dicts) or a list of them"
        )
    for conversation in messages:
        if not isinstance(conversation, (list, tuple)) or not conversation:
            raise ValueError(f"a conversation must be a non-empty list of messages, got {conversation!r}")
        for message in conversation:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ValueError(f"a message must be a dict with a 'role' string, got {message!r}")
            if not isinstance(message.get("content"), str):
                raise ValueError(f"message content must be a string, got {message.get('content')!r}")
    return [list(conversation) for conversation in messages]


def chat_prompts(
    tokenizer: Tokenizer, messages: Any, chat_template_kwargs: dict | None = None
) -> list[list[int]]:
    """The token ids of each conversation's prompt."""
    if tokenizer.chat_template is None:
        raise ValueError("chat needs a chat template, and this model's tokenizer has none")
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
        raise ValueError(f"chat_template_kwargs={chat_template_kwargs!r} must be None or a dict")
    prompts = []
    for conversation in conversations_of(messages):
        text = tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, **(chat_template_kwargs or {})
        )
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts
