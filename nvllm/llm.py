from __future__ import annotations

from typing import Any

from nvllm.config import EngineConfig
from nvllm.engine.config_resolution import engine_config
from nvllm.engine.llm_engine import LLMEngine


class LLM(LLMEngine):
    """`LLM(model=None | checkpoint dir | preset name, **overrides)`.

    Overrides take nano-vLLM's keyword names (`enforce_eager`, `tensor_parallel_size`, `kvcache_block_size`,
    `max_num_seqs`, ...) or any config key as `group__key` (`cache__enable_prefix_caching=False`).
    Use it as a context manager, or call `shutdown()`, to release the GPU memory and worker processes.
    """

    def __init__(self, model: str | None = None, **overrides: Any):
        super().__init__(engine_config(model, **overrides))

    @classmethod
    def from_config(cls, config: EngineConfig) -> LLM:
        llm = cls.__new__(cls)
        LLMEngine.__init__(llm, config)
        return llm
