"""OpenAI request bodies as the engine's `SamplingParams`: the one place that maps a field of
/v1/completions or /v1/chat/completions onto a sampling field. Fields no mapping names are refused (a
ValueError naming them), never silently ignored."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from nvllm.sampling_params import SamplingParams

Endpoint = Literal["completions", "chat"]

# OpenAI's and vLLM's fields that map one to one onto a SamplingParams field of the same name
SAME_NAME = (
    "n",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "stop_token_ids",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
    "ignore_eos",
    "include_stop_str_in_output",
    "min_p",
    "allowed_token_ids",
    "bad_words",
    "prompt_logprobs",
    "skip_special_tokens",
    "structured_outputs",
)
# read by the server itself, not by sampling
REQUEST_FIELDS = {"model", "stream", "stream_options", "priority", "user"}
ENDPOINT_FIELDS: dict[Endpoint, set[str]] = {
    "completions": {"prompt", "max_tokens", "logprobs", "logit_bias"},
    "chat": {
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "response_format",
        "chat_template_kwargs",
    },
}


def sampling_params(body: dict[str, Any], endpoint: Endpoint, default_max_tokens: int) -> SamplingParams:
    """The SamplingParams of a request body; a ValueError names a field that is unknown, of the wrong
    type, or not supported by this engine. `default_max_tokens`: where the body sets none."""
    unknown = sorted(set(body) - REQUEST_FIELDS - ENDPOINT_FIELDS[endpoint] - set(SAME_NAME))
    if unknown:
        raise ValueError(f"unknown request field(s) {unknown}")
    given = {key: value for key, value in body.items() if value is not None}
    fields = {name: given[name] for name in SAME_NAME if name in given}
    max_tokens = given.get("max_completion_tokens", given.get("max_tokens", default_max_tokens))
    fields["max_tokens"] = max_tokens
    logprobs = _logprobs(given, endpoint)
    if logprobs is not None:
        fields["logprobs"] = logprobs
    if "logit_bias" in given:
        fields["logit_bias"] = _logit_bias(given["logit_bias"])
    if "response_format" in given:
        structured = _structured_outputs(given["response_format"])
        if structured is not None:
            fields["structured_outputs"] = structured
    supported = {field.name for field in dataclasses.fields(SamplingParams) if field.init}
    unsupported = sorted(set(fields) - supported)
    if unsupported:
        raise ValueError(f"request field(s) {unsupported} not supported by this server")
    return SamplingParams(**fields)


def _logprobs(given: dict[str, Any], endpoint: Endpoint) -> int | None:
    """Completions ask for `logprobs: k` top log-probabilities per token; chat for `logprobs: true` with
    `top_logprobs: k`."""
    if endpoint == "completions":
        return given.get("logprobs")
    wanted = given.get("logprobs", False)
    if not isinstance(wanted, bool):
        raise ValueError(f"logprobs={wanted!r} must be true or false (top_logprobs: how many alternatives)")
    if "top_logprobs" in given and not wanted:
        raise ValueError("top_logprobs needs logprobs=true")
    return given.get("top_logprobs", 0) if wanted else None


def _logit_bias(bias: Any) -> dict[int, float]:
    """JSON object keys are strings: token ids as OpenAI sends them."""
    if not isinstance(bias, dict):
        raise ValueError(f"logit_bias={bias!r} must be an object of token id -> bias")
    try:
        return {int(token): float(value) for token, value in bias.items()}
    except (TypeError, ValueError):
        raise ValueError(f"logit_bias={bias!r} must map token ids to numbers") from None


def _structured_outputs(response_format: Any) -> dict[str, Any] | None:
    """`response_format` as a structured-outputs request: a JSON schema, any JSON object, or free text."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json": {"type": "object"}}
    if kind == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        schema = response_format["json_schema"].get("schema")
        if isinstance(schema, dict):
            return {"json": schema}
    raise ValueError(
        f"response_format={response_format!r} must be {{'type': 'text' | 'json_object'}} or "
        "{'type': 'json_schema', 'json_schema': {'schema': {...}}}"
    )
