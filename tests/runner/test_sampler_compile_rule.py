"""`compile.sampler` decides whether the sampler is compiled: auto compiles it where the model is compiled on
CUDA, on and off say so whatever the device (so that a CPU test can take the compiled path)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nvllm.config import EngineConfig
from nvllm.engine.config_resolution import resolve


def resolved(sampler: str, enabled: bool | None, device: str = "cpu") -> EngineConfig:
    config = EngineConfig(device=device)
    config = dataclasses.replace(config, compile=dataclasses.replace(config.compile, enabled=enabled))
    return resolve(dataclasses.replace(config, compile=dataclasses.replace(config.compile, sampler=sampler)))


@pytest.mark.parametrize(
    "sampler, enabled, expected",
    [("auto", True, "off"), ("auto", None, "off"), ("on", False, "on"), ("off", True, "off")],
)
def test_sampler_compile_is_a_config_decision(sampler, enabled, expected):
    config = resolved(sampler, enabled)
    assert config.compile.sampler == expected
    assert resolve(config) == config  # resolving a resolved config changes nothing


def test_an_unknown_sampler_mode_is_refused():
    with pytest.raises(ValueError, match="compile.sampler='fast' must be auto, on or off"):
        resolved("fast", None)


def test_auto_compiles_the_sampler_where_the_model_is_compiled_on_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolved("auto", None, "cuda").compile.sampler == "on"
    assert resolved("auto", False, "cuda").compile.sampler == "off"
