"""Validation reads each choice from the module that owns it, and `auto` settles by one rule each — against
values written out by hand."""

import dataclasses

import pytest
import torch

from nvllm.attention import BACKENDS, TorchBackend
from nvllm.config import AttentionConfig, CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from nvllm.engine.config_resolution import engine_config, resolve, validate
from nvllm.runner.dtypes import resolved_dtype
from nvllm.scheduler import policy


def with_(**groups) -> EngineConfig:
    return dataclasses.replace(EngineConfig(device="cpu"), **groups)


@pytest.mark.parametrize(
    "config, message",
    [
        (
            with_(model=ModelConfig(dtype="int8")),
            "model.dtype='int8' must be auto, bfloat16, float16 or float32",
        ),
        (with_(attention=AttentionConfig(backend="xformers")), "must be auto, flash_attn or torch"),
        (
            with_(attention=AttentionConfig(cascade="always")),
            "attention.cascade='always' must be auto, on or off",
        ),
        (with_(scheduler=SchedulerConfig(policy="lifo")), "scheduler.policy='lifo' must be fcfs or priority"),
        (with_(cache=CacheConfig(dtype="fp16")), "cache.dtype='fp16' must be auto or fp8"),
    ],
)
def test_each_choice_is_listed_as_its_owner_declares_it(config, message):
    with pytest.raises(ValueError, match=message):
        validate(config)


def test_a_choice_its_owner_adds_is_valid_without_touching_the_config(monkeypatch):
    monkeypatch.setitem(BACKENDS, "reference", TorchBackend)
    monkeypatch.setitem(policy.RANKS, "lifo", lambda seq: -seq.seq_id)
    validate(with_(attention=AttentionConfig(backend="reference"), scheduler=SchedulerConfig(policy="lifo")))


def test_auto_dtype_is_bf16_on_cuda_and_fp32_on_the_cpu():
    assert resolved_dtype("auto", on_cuda=True) == "bfloat16"
    assert resolved_dtype("auto", on_cuda=False) == "float32"
    assert resolved_dtype("float16", on_cuda=False) == "float16"
    assert resolve(EngineConfig(device="cpu")).model.dtype == "float32"


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"model__quantization": "fp8"}, "model.quantization=fp8 needs a GPU of compute capability 9.0"),
        ({"kv_cache_dtype": "fp8"}, "cache.dtype=fp8 needs a GPU of compute capability 8.9"),
    ],
)
def test_fp8_on_a_gpu_too_old_for_it_is_refused_with_the_capabilities(monkeypatch, setting, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(ValueError, match=rf"{message} or later \(.*\); cuda has 8.0"):
        engine_config("tiny", device="cuda", **setting)
