"""The engine as a runner sees it: built from the composed config, timed over a workload, measured."""

from __future__ import annotations

import time

import torch
from omegaconf import DictConfig

from nvllm import LLM
from nvllm.config import engine_config_from_run_config, resolve_device
from nvllm.engine.llm_engine import Prompt
from nvllm.sampling_params import SamplingParams


def _on_cuda(llm: LLM) -> bool:
    return resolve_device(llm.config.device).startswith("cuda")


def start_engine(cfg: DictConfig) -> LLM:
    """The engine `cfg` describes (use it as a context manager: jobs share one process). The GPU's peak
    memory counter is reset first, so that the peak reported is this job's."""
    config = engine_config_from_run_config(cfg)
    if resolve_device(config.device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    return LLM.from_config(config)


def timed_generate(
    llm: LLM, prompts: list[Prompt], params: list[SamplingParams], use_tqdm: bool = True
) -> tuple[list[dict], dict]:
    """The outputs, and nano-vLLM's throughput: generated tokens / wall time of `generate`."""
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=use_tqdm)
    wall_s = time.perf_counter() - start
    generated = sum(len(output["token_ids"]) for output in outputs)
    return outputs, {"output_tokens": generated, "wall_s": wall_s, "output_tok_per_s": generated / wall_s}


def engine_metrics(llm: LLM) -> dict:
    """Per-phase speed, start-up times, memory and scheduling counters (call before shutdown)."""
    stats = llm.stats()
    return {
        "prefill_tok_per_s": stats["prefill_tok_per_s"],
        "decode_tok_per_s": stats["decode_tok_per_s"],
        "startup_s": stats["startup_s"],
        "load_s": stats["load_s"],
        "compile_s": stats.get("compile_s", 0.0),  # absent when compile is off
        "capture_s": stats.get("capture_s", 0.0),
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if _on_cuda(llm) else None,
        "num_kv_blocks": stats["num_kv_blocks"],
        "num_preemptions": stats["num_preemptions"],
        "prefix_cache_hit_rate": stats["prefix_cache_hit_rate"],
    }


def throughput_line(metrics: dict) -> str:
    return (
        f"Throughput: {metrics['output_tokens']} tokens in {metrics['wall_s']:.2f}s = "
        f"{metrics['output_tok_per_s']:.1f} tok/s (prefill {metrics['prefill_tok_per_s']:.1f} tok/s, "
        f"decode {metrics['decode_tok_per_s']:.1f} tok/s)"
    )


def report(metrics: dict) -> str:
    """The throughput line, start-up, memory and scheduling (results.json and wandb hold every metric)."""
    peak = metrics["peak_gpu_memory_gib"]
    return "\n".join([
        throughput_line(metrics),
        f"Startup: {metrics['startup_s']:.1f}s (load {metrics['load_s']:.1f}s, "
        f"compile {metrics['compile_s']:.1f}s, capture {metrics['capture_s']:.1f}s); peak GPU memory "
        + (f"{peak:.2f} GiB" if peak is not None else "n/a (CPU)"),
        f"KV blocks: {metrics['num_kv_blocks']}; preemptions: {metrics['num_preemptions']}; "
        f"prefix-cache hit rate: {metrics['prefix_cache_hit_rate']:.1%}",
    ])
