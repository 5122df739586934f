"""What a request's output must look like (vLLM's `StructuredOutputsParams`): a JSON schema, a regular
expression, one of a list of choices, or a grammar — exactly one. Checked here for its shape only; whether a
schema, regex or grammar is valid is the grammar compiler's question, asked when the request is submitted
(nvllm/sampling/grammar_compiler.py), so that `import nvllm` needs no grammar engine."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

KINDS = ("json", "regex", "choice", "grammar")


@dataclass(frozen=True)
class StructuredOutputsParams:
    """`json`: a JSON schema (a dict or its JSON text); `regex`: a pattern the whole output matches;
    `choice`: the output is one of these strings; `grammar`: a Lark grammar (llguidance's syntax)."""

    json: dict | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None

    def __post_init__(self) -> None:
        given = [name for name in KINDS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"structured_outputs must set exactly one of {', '.join(KINDS)}; got {given or 'none'}"
            )
        if self.json is not None and not isinstance(self.json, (dict, str)):
            raise ValueError(f"structured_outputs json={self.json!r} must be a schema: a dict or JSON text")
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"structured_outputs {name}={value!r} must be a non-empty string")
        choice = self.choice
        if choice is not None:
            is_list = isinstance(choice, (list, tuple))
            if not is_list or not choice or not all(isinstance(c, str) for c in choice):
                raise ValueError(f"structured_outputs choice={choice!r} must be a non-empty list of strings")
            object.__setattr__(self, "choice", list(choice))

    @property
    def kind(self) -> str:
        return next(name for name in KINDS if getattr(self, name) is not None)

    @property
    def key(self) -> tuple[str, str]:
        """The constraint as text (its kind and value), by which compiled grammars are cached."""
        value = getattr(self, self.kind)
        if not isinstance(value, str):
            value = json.dumps(value, sort_keys=True)
        return self.kind, value


def structured_outputs_of(value: Any) -> StructuredOutputsParams | None:
    """`SamplingParams.structured_outputs` as given (None, the dataclass, or a dict of its fields) as the
    dataclass."""
    if value is None or isinstance(value, StructuredOutputsParams):
        return value
    if isinstance(value, dict):
        unknown = set(value) - {f.name for f in fields(StructuredOutputsParams)}
        if unknown:
            raise ValueError(
                f"structured_outputs has unknown keys {sorted(unknown)}: it takes one of {', '.join(KINDS)}"
            )
        return StructuredOutputsParams(**value)
    raise ValueError(
        f"structured_outputs={value!r} must be None, a StructuredOutputsParams or a dict such as "
        '{"json": schema}'
    )
