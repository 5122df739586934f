"""nvllm: an offline inference engine for Qwen3 models."""

from nvllm.sampling_params import SamplingParams, StructuredOutputsParams

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams"]


def __getattr__(name: str):
    # Imported on first use: tensor-parallel workers import this package too, and need neither the
    # tokenizer nor transformers that `LLM` brings in (seconds of start-up per worker).
    if name == "LLM":
        from nvllm.llm import LLM

        return LLM
    raise AttributeError(f"module 'nvllm' has no attribute {name!r}")
