"""Start-up's choice, report and last act: which runner serves the config, what the KV cache holds, and
the objects start-up keeps taken out of the garbage collector's full passes."""

from __future__ import annotations

import gc
import logging

from nvllm.config import EngineConfig
from nvllm.runner.contract import Runner
from nvllm.runner.model_runner import ModelRunner
from nvllm.scheduler.block_manager import BlockManager

logger = logging.getLogger("nvllm")


def make_model_runner(config: EngineConfig) -> Runner:
    if config.parallel.tensor_parallel_size > 1:
        from nvllm.distributed.tensor_parallel import TensorParallelRunner

        return TensorParallelRunner(config)
    return ModelRunner(config)


def log_startup(config: EngineConfig, block_manager: BlockManager, timings: dict[str, float]) -> None:
    blocks, block_size = block_manager.num_blocks, config.cache.block_size
    max_len = config.scheduler.max_model_len
    timings_text = ", ".join(f"{name[:-2]} {seconds:.1f}s" for name, seconds in timings.items())
    logger.info(
        "KV cache: %d blocks of %d tokens (%d tokens; %d sequences of max_model_len=%d at once); %s",
        blocks,
        block_size,
        blocks * block_size,
        blocks // block_manager.blocks_for(max_len),
        max_len,
        timings_text,
    )


def freeze_startup_objects() -> None:
    """What start-up made and keeps (the model; dynamo's and inductor's graphs, hundreds of thousands of
    objects) is taken out of the garbage collector's full passes, each of which would otherwise walk it all
    in the middle of a generate call; the engine's shutdown gives it back. Start-up's garbage goes first."""
    gc.collect()
    gc.freeze()
