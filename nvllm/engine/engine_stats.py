"""What `LLMEngine.stats()` reports: the engine's token and time counters, its start-up timings, and the
model work and device utilization they imply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvllm.profiling.utilization import utilization_stats

if TYPE_CHECKING:
    from nvllm.engine.llm_engine import LLMEngine


def tokens_per_second(num_tokens: int, seconds: float) -> float:
    return num_tokens / seconds if seconds > 0 else 0.0


def engine_stats(engine: LLMEngine) -> dict:
    stats = {
        "num_kv_blocks": engine.block_manager.num_blocks,
        "num_preemptions": engine.scheduler.num_preemptions,
        "prefix_cache_hit_rate": engine.block_manager.prefix_hit_rate,
        "prefill_tokens": engine.num_prefill_tokens,
        "decode_tokens": engine.num_decode_tokens,
        # KV tokens decode steps read (per layer), and what they would read without cascade attention
        "decode_kv_tokens_read": engine.decode_kv_tokens_read,
        "decode_kv_tokens_read_plain": engine.decode_kv_tokens_read_plain,
        "prefill_s": engine.prefill_seconds,
        "decode_s": engine.decode_seconds,
        "prefill_tok_per_s": tokens_per_second(engine.num_prefill_tokens, engine.prefill_seconds),
        "decode_tok_per_s": tokens_per_second(engine.num_decode_tokens, engine.decode_seconds),
        **engine.startup_timings,
        **engine.work.stats(),
    }
    num_devices = engine.config.parallel.tensor_parallel_size
    return {**stats, **utilization_stats(stats, engine.device_peak, num_devices)}
