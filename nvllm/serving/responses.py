"""Engine outputs as OpenAI's response objects: whole completions, stream chunks, log-probabilities, usage
and errors, in the shapes OpenAI's clients parse."""

from __future__ import annotations

import json
import time

from nvllm.outputs import CompletionOutput, TokenLogprobs
from nvllm.tokenizer.detokenizer import decode


def usage(num_prompt_tokens: int, num_completion_tokens: int) -> dict:
    return {
        "prompt_tokens": num_prompt_tokens,
        "completion_tokens": num_completion_tokens,
        "total_tokens": num_prompt_tokens + num_completion_tokens,
    }


def error_body(message: str, status: int) -> dict:
    kinds = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 413: "BadRequestError"}
    return {"error": {"message": message, "type": kinds.get(status, "InternalServerError"), "param": None,
                      "code": status}}  # fmt: skip


def sse(payload: dict | str) -> str:
    """One server-sent event, as OpenAI's stream: `data: {json}` and a blank line."""
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


def _top(entry: TokenLogprobs, num_top: int) -> list[tuple[int, float]]:
    return sorted(entry.items(), key=lambda item: -item[1])[:num_top]


def completion_logprobs(delta: CompletionOutput, tokenizer, num_top: int, text_offset: int) -> dict:
    """/v1/completions' `logprobs` object for the delta's tokens."""
    tokens = [decode(tokenizer, [token]) for token in delta.token_ids]
    offsets = []
    for token_text in tokens:
        offsets.append(text_offset)
        text_offset += len(token_text)
    return {
        "tokens": tokens,
        "token_logprobs": [entry[token] for token, entry in zip(delta.token_ids, delta.logprobs)],
        "top_logprobs": [
            {decode(tokenizer, [token]): logprob for token, logprob in _top(entry, num_top)}
            for entry in delta.logprobs
        ],
        "text_offset": offsets,
    }


def _chat_token(token: int, logprob: float, tokenizer) -> dict:
    text = decode(tokenizer, [token])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(delta: CompletionOutput, tokenizer, num_top: int) -> dict:
    """/v1/chat/completions' `logprobs` object for the delta's tokens."""
    return {
        "content": [
            {
                **_chat_token(token, entry[token], tokenizer),
                "top_logprobs": [_chat_token(t, lp, tokenizer) for t, lp in _top(entry, num_top)],
            }
            for token, entry in zip(delta.token_ids, delta.logprobs)
        ]
    }


def envelope(request_id: str, object_kind: str, model: str, choices: list[dict]) -> dict:
    return {"id": request_id, "object": object_kind, "created": int(time.time()), "model": model,
            "choices": choices}  # fmt: skip
