"""An experiment's requests, drawn from its `workload` config: text prompts, or seeded random tokens."""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig, OmegaConf

from nvllm.config import WorkloadConfig, to_dataclass, validate_workload
from nvllm.engine.llm_engine import Prompt
from nvllm.sampling_params import SamplingParams


def workload_config(cfg: DictConfig) -> WorkloadConfig:
    workload = to_dataclass(WorkloadConfig, OmegaConf.to_container(cfg.workload, resolve=True))
    validate_workload(workload)
    return workload


def _lengths(rng: np.random.Generator, shortest: int | None, longest: int, count: int) -> list[int]:
    if shortest is None:
        return [longest] * count
    return rng.integers(shortest, longest, endpoint=True, size=count).tolist()


def make_requests(workload: WorkloadConfig, vocab_size: int) -> tuple[list[Prompt], list[SamplingParams]]:
    """`num_seqs` prompts with their sampling params; the same ones for the same seed, whatever the engine.
    Random prompts are token-id lists, ids uniform in [0, vocab_size)."""
    rng = np.random.default_rng(workload.seed)
    count = workload.num_seqs
    if workload.prompts:
        prompts = [workload.prompts[i % len(workload.prompts)] for i in range(count)]
    else:
        input_lens = _lengths(rng, workload.min_input_len, workload.input_len, count)
        prompts = [rng.integers(0, vocab_size, size=length).tolist() for length in input_lens]
    output_lens = _lengths(rng, workload.min_output_len, workload.output_len, count)
    params = [
        SamplingParams(temperature=workload.temperature, max_tokens=length, ignore_eos=workload.ignore_eos)
        for length in output_lens
    ]
    return prompts, params
