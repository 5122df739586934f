"""Online serving under load: the OpenAI server started in this process on the job's engine (or the one at
`serving.url`, measured without building an engine here), the workload's requests sent at each of
`serving.request_rates` (requests/s; gamma arrivals of `serving.burstiness`, 1 = Poisson; `inf` = all at
once), and per rate the request and output throughput, TTFT, TPOT, ITL and end-to-end percentiles, and
goodput under `serving.slo`. A latency-vs-rate figure goes beside results.json."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from experiments.harness.job import job_run, prepare_job  # noqa: E402
from experiments.runners.serving_client import arrival_gaps, send_at_rate, served_model  # noqa: E402
from experiments.runners.serving_stats import serving_metrics  # noqa: E402

FIGURE = "latency_vs_rate.png"


def plot_latency_vs_rate(per_rate: list[dict], path: Path) -> None:
    rates = [row["request_rate"] for row in per_rate]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for metric in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms"):
        axes[0].plot(rates, [row[metric] for row in per_rate], marker="o", label=metric)
    for metric in ("tpot_p50_ms", "itl_p99_ms"):
        axes[1].plot(rates, [row[metric] for row in per_rate], marker="o", label=metric)
    for axis in axes:
        axis.set_xlabel("request rate (req/s)")
        axis.set_ylabel("ms")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def run(cfg: DictConfig, output_dir: Path, name: str | None = None) -> dict:
    job = prepare_job(cfg, output_dir, name, job_type="serving")
    serving = cfg.serving
    rates = [float(rate) for rate in serving.request_rates]
    per_rate = []
    with job_run(job, build_engine=serving.url is None) as run:
        if serving.url is None:
            from nvllm.serving.server import app_for, background_server

            model = job.engine.model.name
            server = background_server(app_for(run.llm, model))
        else:
            url = serving.url.rstrip("/")
            model = served_model(url)
            server = nullcontext(url)
        with server as url:
            for index, rate in enumerate(rates):
                prompts, params = run.requests(index)
                gaps = arrival_gaps(len(prompts), rate, serving.burstiness, job.workload.seed + index)
                timings, duration_s = asyncio.run(send_at_rate(url, model, prompts, params, gaps))
                metrics = {
                    "request_rate": rate,
                    **serving_metrics(timings, duration_s, serving.slo.ttft_ms, serving.slo.tpot_ms),
                }
                run.wandb.log(metrics)
                per_rate.append(metrics)
                print(
                    f"rate {rate:g} req/s: {metrics['output_tok_per_s']:.1f} output tok/s, TTFT p50 "
                    f"{metrics['ttft_p50_ms']:.1f} ms, TPOT p50 {metrics['tpot_p50_ms']:.1f} ms, "
                    f"goodput {metrics['goodput']:.2f} req/s"
                )
        plot_latency_vs_rate(per_rate, job.output_dir / FIGURE)
        summary = {f"{key}@{row['request_rate']:g}": value for row in per_rate for key, value in row.items()}
        if run.sharegpt is not None:
            summary.update(run.sharegpt.counts())
        run.record(summary, per_rate)
    return {"per_rate": per_rate, **summary}
