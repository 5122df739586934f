"""Throughput under shared prefixes (`+experiment=shared_prefix`): the bench's measurement, plus what shared
prefixes change — prefill tokens actually computed, and KV bytes read per generated token by decode steps,
with cascade attention and as the plain path reads them (counted from the steps' shapes). The workload runs
`workload.repeats` times, on fresh requests (new prefixes) each time."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from experiments.harness.engine import engine_metrics, report, timed_generate
from experiments.harness.job import job_run, prepare_job
from experiments.harness.profiling import measured_repeat, save_profile
from experiments.harness.repeats import measure_repeats
from nvllm import LLM
from nvllm.runner.dtypes import DTYPES, kv_cache_dtype
from nvllm.runner.memory import kv_bytes_per_token


def shared_prefix_metrics(llm: LLM, before: dict, after: dict) -> dict:
    """What the engine computed and read between its stats `before` and `after`."""

    def delta(key: str) -> int:
        return after[key] - before[key]

    decode_tokens = max(delta("decode_tokens"), 1)
    cache_dtype = kv_cache_dtype(llm.config.cache.dtype, DTYPES[llm.config.model.dtype])
    per_token = kv_bytes_per_token(llm.config.model, cache_dtype)  # all ranks together
    return {
        "prefill_tokens_computed": delta("prefill_tokens"),
        "kv_bytes_per_decode_token": delta("decode_kv_tokens_read") * per_token / decode_tokens,
        "kv_bytes_per_decode_token_plain": delta("decode_kv_tokens_read_plain") * per_token / decode_tokens,
    }


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="shared_prefix")
    with job_run(job) as run:

        def measure(repeat: int) -> dict:
            before = run.llm.stats()
            with measured_repeat(run.llm, repeat) as utilization:
                metrics = timed_generate(run.llm, *run.requests(repeat))[1]
            return {**metrics, **utilization, **shared_prefix_metrics(run.llm, before, run.llm.stats())}

        repeated = measure_repeats(run.llm, job.repeats, measure)
        metrics = {**repeated.spread, **engine_metrics(run.llm)}
        save_profile(run.llm, job.output_dir, run.wandb)
        run.record(metrics, repeated.per_repeat)
    print(report(metrics, job.repeats))
    print(
        f"Prefill tokens computed: {metrics['prefill_tokens_computed']}; KV read per decode token: "
        f"{metrics['kv_bytes_per_decode_token'] / 2**20:.2f} MiB "
        f"(without cascade: {metrics['kv_bytes_per_decode_token_plain'] / 2**20:.2f} MiB)"
    )
    return metrics
