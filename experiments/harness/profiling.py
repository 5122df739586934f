"""What a runner adds for seeing inside its run: MFU and MBU of what it measured, and with profiling on,
the profiler's files, its torch trace and the figures, in the run dir and in the job's wandb run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import wandb

from experiments.harness.live import timeline_values
from experiments.studies.trace_kernels import summary as kernel_summary
from nvllm import LLM
from nvllm.profiling.timeline import write_profile
from nvllm.profiling.utilization import utilization_stats
from nvllm.visualize import render

TRACE_FILE = "trace.json"
KERNELS_FILE = "kernels.txt"  # the trace's GPU kernels, summed by name
UTILIZATION_KEYS = ("prefill_s", "decode_s", "prefill_flops", "decode_flops", "prefill_bytes", "decode_bytes")


@contextmanager
def measured_repeat(llm: LLM, repeat: int) -> Iterator[dict]:
    """One measured repeat of a runner: the profiler starts afresh with the first (the warm-up before it is
    not what is profiled), and MFU and MBU of the prefill and decode work done inside the block (None
    without a known peak) go into the yielded dict when the block ends."""
    if repeat == 0:
        llm.profiler.reset()
    metrics: dict = {}
    before = llm.stats()
    yield metrics
    after = llm.stats()
    delta = {key: after[key] - before[key] for key in UTILIZATION_KEYS}
    metrics.update(utilization_stats(delta, llm.device_peak, llm.config.parallel.tensor_parallel_size))


def save_profile(llm: LLM, output_dir: Path, wandb_job: wandb.Run) -> None:
    """With profiling on: the timelines, numbers and summary (printed too), the torch trace if one was
    taken, and the figures into `output_dir`; the figures as images and the step timeline as time series
    into the wandb run. Nothing with profiling off."""
    profiler = llm.profiler
    if not profiler.enabled:
        return
    output_dir = Path(output_dir)
    no_trace = profiler.no_trace_reason()
    # the stream's rows all in steps.csv, which is written again whole: the same rows
    written = write_profile(output_dir, profiler, TRACE_FILE)
    trace = next((path for path in written if path.name == TRACE_FILE), None)
    figures = render(output_dir)
    print(profiler.summary())
    if no_trace and llm.config.profile.torch_trace_steps:
        print(f"No torch trace written: {no_trace}")
    if trace:
        kernels = kernel_summary(trace, top=40)
        (output_dir / KERNELS_FILE).write_text(kernels + "\n")
        print(kernels)
    print(
        f"Profile: {output_dir} (steps.csv, requests.csv, profile.json, figures/)"
        + (f"; torch trace: {trace}, its kernels: {KERNELS_FILE}" if trace else "")
    )
    wandb_job.define_metric("timeline/*", step_metric="timeline/time_s")
    for step in profiler.steps():
        wandb_job.log({f"timeline/{key}": value for key, value in timeline_values(step).items()})
    wandb_job.log({f"figures/{path.stem}": wandb.Image(str(path)) for path in figures})
