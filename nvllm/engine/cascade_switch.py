"""Whether a running engine may switch cascade attention to a mode (`LLMEngine.set_cascade`)."""

from __future__ import annotations

import dataclasses

from nvllm.config import EngineConfig
from nvllm.engine.config_resolution import validate


def check_cascade_switch(config: EngineConfig, mode: str) -> None:
    """`mode` must be a valid `attention.cascade`; a compiled engine started with cascade off compiled and
    captured no cascade graphs, so it stays off."""
    validate(dataclasses.replace(config, attention=dataclasses.replace(config.attention, cascade=mode)))
    if mode != "off" and config.attention.cascade == "off" and config.compile.enabled:
        raise ValueError(
            f"attention.cascade={mode!r}: this engine started with cascade off, so it has no compiled "
            "cascade graphs; start it with attention.cascade=on or auto"
        )
