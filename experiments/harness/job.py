"""One experiment job: its config checked and settled before anything is written, then the engine, the
wandb run and `results.json` with provenance. Every runner goes through here:

    job = prepare_job(cfg, output_dir, name, job_type="bench")
    with job_run(job) as run:
        repeated = measure_repeats(run.llm, job.repeats, lambda repeat: ...)
        run.record({**repeated.spread, **engine_metrics(run.llm)}, repeated.per_repeat)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
import wandb
from omegaconf import DictConfig, OmegaConf

from experiments.harness.config import (
    WorkloadConfig,
    cpu_sized_note,
    engine_config_from_run_config,
    resolved_repeats,
    workload_config,
)
from experiments.harness.engine import start_engine
from experiments.harness.live import end_marked, live_steps
from experiments.harness.provenance import provenance
from experiments.harness.sharegpt import ShareGPTPool, read_sharegpt
from experiments.harness.threads import cpu_threads, thread_choice
from experiments.harness.tracking import record, wandb_run
from experiments.harness.workload import check_workload_fits, make_requests
from nvllm import LLM
from nvllm.config import EngineConfig
from nvllm.engine.llm_engine import Prompt
from nvllm.sampling_params import SamplingParams
from nvllm.tokenizer.tokenizer import Tokenizer, load_tokenizer


@dataclass(frozen=True)
class Job:
    cfg: DictConfig
    output_dir: Path
    name: str | None  # the wandb run's: the job's overrides
    job_type: str
    engine: EngineConfig  # resolved for this machine
    workload: WorkloadConfig
    repeats: int


def check_job_config(cfg: DictConfig) -> tuple[EngineConfig, WorkloadConfig, int]:
    """The engine config resolved for this machine (a device or attention backend it lacks fails here),
    the workload and the number of repeats, or a ValueError naming what is wrong."""
    engine = engine_config_from_run_config(cfg)
    workload = workload_config(cfg, engine.device)
    repeats = resolved_repeats(workload, engine.device)
    if repeats > 1 and workload.prompts:
        raise ValueError(
            f"workload.repeats={repeats} with text prompts: every repeat would send the same prompts, which "
            "the prefix cache serves from the first (random prompts are drawn afresh; or set repeats=1)"
        )
    check_workload_fits(workload, engine.scheduler.max_model_len)
    thread_choice(cfg.get("cpu_threads"), engine.device)
    return engine, workload, repeats


def prepare_job(cfg: DictConfig, output_dir: Path, name: str | None, job_type: str) -> Job:
    engine, workload, repeats = check_job_config(cfg)
    if note := cpu_sized_note(cfg, workload):
        print(note)
    return Job(cfg, Path(output_dir), name, job_type, engine, workload, repeats)


@dataclass
class JobRun:
    job: Job
    llm: LLM | None  # None where the job measures an engine elsewhere (a server's URL)
    tokenizer: Tokenizer  # the engine's, or the configured model's where there is no engine here
    wandb: wandb.Run
    provenance: dict

    @cached_property
    def sharegpt(self) -> ShareGPTPool | None:
        """The workload's ShareGPT file read with the engine's tokenizer (once a job), if it names one."""
        name = self.job.workload.sharegpt_file
        if name is None:
            return None
        pool = read_sharegpt(name, self.tokenizer, self.job.engine.scheduler.max_model_len)
        counts = pool.counts()
        print(
            f"ShareGPT file {name}: {counts['sharegpt_conversations_used']} conversations used, "
            f"{counts['sharegpt_skipped_too_long']} skipped as longer than scheduler.max_model_len, "
            f"{counts['sharegpt_skipped_incomplete']} without a human turn answered by a gpt turn"
            + (
                f"; fewer than workload.num_seqs={self.job.workload.num_seqs}: each draw sends them all"
                if len(pool.requests) < self.job.workload.num_seqs
                else ""
            )
        )
        return pool

    def requests(self, repeat: int) -> tuple[list[Prompt], list[SamplingParams]]:
        """The workload's requests for `repeat`: fresh draws each repeat. The sampling is seeded with them
        (torch's generator, which unseeded requests draw from): the same run gives the same completions."""
        torch.manual_seed(self.job.workload.seed + repeat)
        return make_requests(self.job.workload, len(self.tokenizer), repeat, self.sharegpt)

    def record(self, metrics: dict, per_repeat: list[dict], details: dict | None = None) -> None:
        """The job's results into results.json and wandb; `details` (results.json only): what a runner
        reports beyond numbers."""
        job = self.job
        if self.llm is not None:
            self.llm.profiler.stop_stream()  # the live stream's thread logs to wandb too: it ends first
        results = {
            "name": job.name,
            "job_type": job.job_type,
            "metrics": {**metrics, "repeats": len(per_repeat)},  # fewer than asked after a Ctrl-C
            "repeats": per_repeat,
            "provenance": self.provenance,
            "config": OmegaConf.to_container(job.cfg, resolve=True),
            **(details or {}),
        }
        record(self.wandb, job.output_dir, results)


@contextmanager
def job_run(job: Job, build_engine: bool = True) -> Iterator[JobRun]:
    """The job's CPU threads, its wandb run (config: the resolved config and the provenance) and its engine,
    for the block; with `profile.live` the step records streamed while it goes; the end marker written into
    the output dir when it ends. Without `build_engine` (the engine measured runs elsewhere) no engine is
    built: only the model's tokenizer, which the workload needs."""
    with cpu_threads(job.cfg.get("cpu_threads"), job.engine.device) as threads_from:
        facts = {**provenance(job.engine.device), "torch_threads_from": threads_from}
        config = {**OmegaConf.to_container(job.cfg, resolve=True), "provenance": facts}
        with (
            end_marked(job.output_dir),
            wandb_run(job.cfg.wandb, job.output_dir, job.name, job.job_type, config) as run,
        ):
            if not build_engine:
                yield JobRun(job, None, load_tokenizer(job.engine.model.path), run, facts)
                return
            with start_engine(job.engine) as llm, live_steps(llm, job.output_dir, run):
                yield JobRun(job, llm, llm.tokenizer, run, facts)
