"""A profiled run of the tiny model with preemptions (a small KV cache), written into a run dir: the files the
visualizer and its follower read, and what the profiler recorded, their oracle."""

from __future__ import annotations

from pathlib import Path

from nvllm import SamplingParams
from nvllm.profiling.timeline import write_run_dir
from tests.helpers.engine_utils import random_prompt, tiny_llm


def write_profiled_run(directory: Path) -> tuple[list[dict], list[dict], dict]:
    """The run's files in `directory`; returns its recorded steps, requests and profile."""
    with tiny_llm(profile=True, kvcache_block_size=16, num_kvcache_blocks=10) as llm:
        prompts = [random_prompt(10 + 5 * i, seed=i) for i in range(6)]
        llm.generate(prompts, SamplingParams(max_tokens=24, ignore_eos=True), use_tqdm=False)
        assert llm.stats()["num_preemptions"] > 0
        write_run_dir(directory, llm.profiler)
        return llm.profiler.steps(), llm.profiler.requests(), llm.profiler.as_dict()
