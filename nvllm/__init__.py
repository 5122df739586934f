"""nvllm: an offline inference engine for Qwen3 models."""

from nvllm.llm import LLM
from nvllm.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams"]
