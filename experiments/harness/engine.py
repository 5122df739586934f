"""The engine as a runner sees it: built from the composed config, timed over a workload, measured."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from nvllm import LLM
from nvllm.config import EngineConfig
from nvllm.engine.llm_engine import Prompt
from nvllm.engine.progress import stderr_is_terminal
from nvllm.engine.rates import tokens_per_second
from nvllm.profiling.kernel_compiles import triton_compiles
from nvllm.sampling_params import SamplingParams

RANDOM_WEIGHTS_NOTE = (
    "Weights: random (model.path=null), right for speed but the text is noise; "
    "model.path=DIR (or a hub id, org/name) loads a checkpoint"
)


def start_engine(config: EngineConfig) -> LLM:
    """The engine of a resolved config (use it as a context manager: jobs share one process). The GPU's
    peak memory counter is reset first, so that the peak reported is this job's."""
    if config.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    mode = "compiled" if config.compile.enabled else "eager"
    print(f"Starting {config.model.name} on {config.device} ({mode}, {config.attention.backend} attention)")
    if config.model.path is None:
        print(RANDOM_WEIGHTS_NOTE)
    return LLM.from_config(config)


def warm_up(llm: LLM) -> None:
    """A request before timing, as nano-vLLM's bench has: a process's first steps pay one-off costs (lazy
    library initialisation, kernel selection) that would otherwise land in the first job of a sweep. The
    Triton kernels of prefill steps of every size were compiled by the engine's start-up
    (`nvllm.runner.prefill_warm_up`)."""
    llm.generate([[0] * 8], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)


def _counters(llm: LLM) -> dict[str, tuple[int, float]]:
    """Over the engine's life, from its per-step accounting: tokens and seconds per phase, and the prompt
    tokens looked up in the prefix cache and found there."""
    stats = llm.stats()
    counters = {phase: (stats[f"{phase}_tokens"], stats[f"{phase}_s"]) for phase in ("prefill", "decode")}
    prefix_cache = (stats["prefix_cache_hit_tokens"], stats["prefix_cache_queried_tokens"])
    return counters | {"prefix_cache": prefix_cache}


@contextmanager
def measured(llm: LLM) -> Iterator[dict]:
    """Wall time, prefill/decode tok/s and the prefix cache's hit rate of what runs inside the block (the
    engine's own counters would include the warm-up and earlier repeats), into the yielded dict when the
    block ends; and `kernel_compiles`, the Triton kernels compiled inside it (None where Triton cannot say),
    named in a printed warning: each is a launch shape start-up's prefill warm-up and the harness's warm-up
    missed, its compile in the wall time."""
    metrics: dict = {}
    before = _counters(llm)
    with triton_compiles() as compiled:
        start = time.perf_counter()
        yield metrics
        metrics["wall_s"] = time.perf_counter() - start
    metrics["kernel_compiles"] = None if compiled is None else len(compiled)
    if compiled:
        print(
            f"Warning: Triton compiled {len(compiled)} kernel(s) inside the measured run, in its wall time "
            f"(launch shapes start-up and the warm-up had not met): {', '.join(compiled)}"
        )
    after = _counters(llm)
    for phase in ("prefill", "decode"):
        tokens, seconds = (now - then for now, then in zip(after[phase], before[phase]))
        metrics[f"{phase}_tok_per_s"] = tokens_per_second(tokens, seconds)
    hits, queried = (now - then for now, then in zip(after["prefix_cache"], before["prefix_cache"]))
    metrics["prefix_cache_hit_rate"] = hits / queried if queried else 0.0


def timed_generate(
    llm: LLM, prompts: list[Prompt], params: list[SamplingParams], use_tqdm: bool = True
) -> tuple[list[dict], dict]:
    """The outputs, and nano-vLLM's throughput: generated tokens / wall time of `generate`. Its progress
    panel shows when `use_tqdm` and stderr is a terminal."""
    with measured(llm) as phases:
        outputs = llm.generate(prompts, params, use_tqdm=use_tqdm and stderr_is_terminal())
    generated = sum(len(output["token_ids"]) for output in outputs)
    throughput = tokens_per_second(generated, phases["wall_s"])
    return outputs, {"output_tokens": generated, "output_tok_per_s": throughput, **phases}


def engine_metrics(llm: LLM) -> dict:
    """Start-up times, memory and scheduling counters (call before shutdown); the prefix cache's hit rate
    is `measured`'s."""
    stats = llm.stats()
    on_cuda = llm.device.startswith("cuda")
    return {
        "startup_s": stats["startup_s"],
        "load_s": stats["load_s"],
        "compile_s": stats["compile_s"],
        "capture_s": stats["capture_s"],
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if on_cuda else None,
        "num_kv_blocks": stats["num_kv_blocks"],
        "num_preemptions": stats["num_preemptions"],
    }


def throughput_line(metrics: dict, repeats: int = 1) -> str:
    """One line of tok/s: a single run's, or the medians of the repeats with the output rate's range."""
    rates = (
        f"{metrics['output_tok_per_s']:.1f} tok/s (prefill {metrics['prefill_tok_per_s']:.1f} tok/s, "
        f"decode {metrics['decode_tok_per_s']:.1f} tok/s)"
    )
    if repeats == 1:
        return f"Throughput: {metrics['output_tokens']} tokens in {metrics['wall_s']:.2f}s = {rates}"
    return (
        f"Throughput, median of {repeats} repeats: {rates}; output tok/s from "
        f"{metrics['output_tok_per_s_min']:.1f} to {metrics['output_tok_per_s_max']:.1f}"
    )


def report(metrics: dict, repeats: int = 1) -> str:
    """The throughput line, start-up, memory and scheduling (results.json and wandb hold every metric)."""
    peak = metrics["peak_gpu_memory_gib"]
    return "\n".join(
        [
            throughput_line(metrics, repeats),
            f"Startup: {metrics['startup_s']:.1f}s (load {metrics['load_s']:.1f}s, "
            f"compile {metrics['compile_s']:.1f}s, capture {metrics['capture_s']:.1f}s); peak GPU memory "
            + (f"{peak:.2f} GiB" if peak is not None else "n/a (CPU)"),
            f"KV blocks: {metrics['num_kv_blocks']}; preemptions: {metrics['num_preemptions']}; "
            f"prefix-cache hit rate: {metrics['prefix_cache_hit_rate']:.1%}",
        ]
    )
