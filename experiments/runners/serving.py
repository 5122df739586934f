"""Online serving under load: the OpenAI server started in this process on the job's engine (or the one at
`serving.url`, measured without building an engine here), the workload's requests sent at each of
`serving.request_rates` (requests/s; gamma arrivals of `serving.burstiness`, 1 = Poisson; `inf` = all at
once), and per rate the request and output throughput, TTFT, TPOT, ITL and end-to-end percentiles, tokens per
streamed chunk, and goodput under `serving.slo`; where the server is this job's, also its engine's own busy
span and throughput over it (`engine_metrics`: what the HTTP side adds is the difference) and, at low rates,
that difference split into the way in and the way back (`hop_metrics`). With
`serving.offline_reference` (an engine of this process only), the same engine offline beside them:
`generate`'s throughput on the highest rate's requests and each lowest-rate request's prefill alone
(experiments/runners/serving_offline.py), each from a cold prefix cache. With `serving.engine_process` the
server's engine is built and stepped in a process of its own (from the job's engine config), and the offline
engine is built here once the server has stopped. A latency-vs-rate figure goes beside results.json."""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from experiments.harness.engine import start_engine  # noqa: E402
from experiments.harness.job import job_run, prepare_job  # noqa: E402
from experiments.harness.profiling import TRACE_FILE  # noqa: E402
from experiments.runners.serving_client import LoadProcesses, arrival_gaps, served_model  # noqa: E402
from experiments.runners.serving_offline import offline_throughput, offline_ttft  # noqa: E402
from experiments.runners.serving_stats import (  # noqa: E402
    engine_metrics,
    hop_metrics,
    serving_metrics,
    ttft_over_prefill,
)
from experiments.studies.trace_kernels import summary as kernel_summary  # noqa: E402
from nvllm.llm import LLM  # noqa: E402
from nvllm.profiling.timeline import SUMMARY_FILE, write_profile  # noqa: E402
from nvllm.serving.served_engine import FinishedRequest  # noqa: E402

FIGURE = "latency_vs_rate.png"
ENGINE_PROFILE_DIR = "engine-profile"  # the server's engine's profile, written by its process at shutdown
OFFLINE_PROFILE_DIR = "offline-profile"  # the offline references' engine's profile, beside it


def print_engine_profile(profile_dir: Path) -> None:
    """The server's engine's profile summary (its host stages per step: "other" is the serving loop's own
    work between steps) and its trace's kernels, where `profile.enabled` had its process write them."""
    summary = profile_dir / SUMMARY_FILE
    if not summary.exists():
        return
    print(f"The server's engine, from its own process ({profile_dir}):\n{summary.read_text()}")
    if (trace := profile_dir / TRACE_FILE).exists():
        print(kernel_summary(trace, top=25))


def plot_latency_vs_rate(per_rate: list[dict], path: Path, offline: dict | None = None) -> None:
    """Latencies and throughput against the request rate (an infinite rate drawn at twice the highest finite
    one), with the offline references as horizontal lines where measured."""
    finite = [row["request_rate"] for row in per_rate if math.isfinite(row["request_rate"])]
    rates = [rate if math.isfinite(rate) else 2 * max(finite, default=1.0) for rate in
             (row["request_rate"] for row in per_rate)]  # fmt: skip
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    for metric in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms"):
        axes[0].plot(rates, [row[metric] for row in per_rate], marker="o", label=metric)
    for metric in ("tpot_p50_ms", "itl_p50_ms", "itl_p99_ms"):
        axes[1].plot(rates, [row[metric] for row in per_rate], marker="o", label=metric)
    throughput = [row["output_tok_per_s"] for row in per_rate]
    axes[2].plot(rates, throughput, marker="o", label="server output tok/s")
    if offline:
        axes[0].axhline(offline["offline_ttft_p50_ms"], color="gray", linestyle="--", label="prefill alone")
        axes[2].axhline(offline["offline_output_tok_per_s"], color="gray", linestyle="--", label="generate")
    all_at_once = "; all at once: at twice the highest" if len(finite) < len(per_rate) else ""
    for axis, unit in zip(axes, ("ms", "ms", "tok/s")):
        axis.set_xlabel(f"request rate (req/s{all_at_once})")
        axis.set_ylabel(unit)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="serving")
    serving = cfg.serving
    rates = [float(rate) for rate in serving.request_rates]
    per_rate, lowest_rate_timings = [], None
    in_process = serving.url is None and not serving.engine_process  # the server's engine is this job's
    load = LoadProcesses(serving.load_processes)  # its processes start with the first rate
    with load, job_run(job, build_engine=in_process) as run:
        if serving.url is None:
            from nvllm.serving.server import app_for, background_server, process_app

            model = job.engine.model.name
            if serving.engine_process:
                app = process_app(job.engine, model, profile_dir=str(job.output_dir / ENGINE_PROFILE_DIR))
            else:
                app = app_for(run.llm, model)
            finished = record_finished(app.state.engine)
            server = background_server(app)
        else:
            finished = None
            url = serving.url.rstrip("/")
            model = served_model(url)
            server = nullcontext(url)
        with server as url:
            for index, rate in enumerate(rates):
                prompts, params = run.requests(index)
                gaps = arrival_gaps(len(prompts), rate, serving.burstiness, job.workload.seed + index)
                if finished is not None:
                    finished.clear()
                timings, duration_s = load.send(url, model, prompts, params, gaps)
                if index == rates.index(min(rates)):  # the requests the offline prefills are of
                    lowest_rate_timings = timings
                metrics = {
                    "request_rate": rate,
                    **serving_metrics(timings, duration_s, serving.slo.ttft_ms, serving.slo.tpot_ms),
                }
                if finished is not None:  # the server is this job's: its engine's side too
                    metrics.update(engine_metrics(list(finished)))
                    metrics.update(hop_metrics(timings, list(map(len, prompts)), list(finished)))
                run.wandb.log(metrics)
                per_rate.append(metrics)
                print(
                    f"rate {rate:g} req/s: {metrics['output_tok_per_s']:.1f} output tok/s, TTFT p50 "
                    f"{_ms(metrics['ttft_p50_ms'])}, TPOT p50 {_ms(metrics['tpot_p50_ms'])}, "
                    f"goodput {metrics['goodput']:.2f} req/s"
                    + (
                        f"; its engine {metrics['engine_output_tok_per_s']:.1f} tok/s over its "
                        f"{metrics['engine_duration_s']:.2f} s busy"
                        if metrics.get("engine_duration_s")
                        else ""
                    )
                )
            offline = prefill_s = None
            if in_process and serving.offline_reference:
                offline, prefill_s = offline_references(run.llm, run, rates)
        if serving.url is None and serving.engine_process:
            print_engine_profile(job.output_dir / ENGINE_PROFILE_DIR)
        if serving.url is None and serving.engine_process and serving.offline_reference:
            with start_engine(job.engine) as llm:  # the server's process released the device
                llm.profiler.reset()  # its steps from here on: the references' own
                offline, prefill_s = offline_references(llm, run, rates)
                write_profile(job.output_dir / OFFLINE_PROFILE_DIR, llm.profiler)
        if offline is not None:
            offline.update(ttft_over_prefill(lowest_rate_timings, prefill_s))
            print(
                f"offline: generate {offline['offline_output_tok_per_s']:.1f} output tok/s, "
                f"a prefill alone p50 {offline['offline_ttft_p50_ms']:.1f} ms"
                + (
                    f" ({offline['offline_ttft_after_idle_p50_ms']:.1f} ms each after idling as at the "
                    "lowest rate)"
                    if "offline_ttft_after_idle_p50_ms" in offline
                    else ""
                )
                + f"; TTFT at {min(rates):g} req/s over each request's prefill alone, median: "
                + ("none" if (ratio := offline["ttft_over_prefill_p50"]) is None else f"{ratio:.2f}x")
            )
        plot_latency_vs_rate(per_rate, job.output_dir / FIGURE, offline)
        summary = {f"{key}@{row['request_rate']:g}": value for row in per_rate for key, value in row.items()}
        summary.update(offline or {})
        if run.sharegpt is not None:
            summary.update(run.sharegpt.counts())
        run.record(summary, per_rate)
    return {"per_rate": per_rate, **summary}


def _ms(value: float | None) -> str:
    """A latency for the log; none where no request had one (TPOT of single-token outputs)."""
    return "none" if value is None else f"{value:.1f} ms"


def record_finished(engine) -> list[FinishedRequest]:
    """A list that every request the served `engine` ends from now on joins as it ends (its metrics still
    count each)."""
    finished: list[FinishedRequest] = []
    counted = engine.on_finished

    def count_and_record(request: FinishedRequest) -> None:
        if counted is not None:
            counted(request)
        finished.append(request)

    engine.on_finished = count_and_record
    return finished


def offline_references(llm: LLM, run, rates: list[float]) -> tuple[dict, list[float]]:
    """The engine offline (the server idle): `generate` on the highest rate's requests, and the lowest rate's
    requests' prefills one at a time, each after the prefix cache is emptied, so that no prompt the server saw
    is a hit; their metrics, and each of those prefills' seconds in request order."""
    highest, lowest = rates.index(max(rates)), rates.index(min(rates))
    if not llm.reset_prefix_cache():
        raise RuntimeError("the server still holds KV blocks after its requests ended")
    offline = offline_throughput(llm, *run.requests(highest))
    llm.reset_prefix_cache()
    ttft, prefill_s = offline_ttft(llm, *run.requests(lowest), rate=rates[lowest])
    return {**offline, **ttft}, prefill_s
