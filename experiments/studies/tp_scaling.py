"""The tensor-parallel results table: `+experiment=bench` and `+experiment=latency` for a model at several
TP sizes on random weights (`model.path=null`), each job in its own process (its own GPUs, group and
compile), then one markdown table: throughput, speed-up and scaling efficiency against the model's
smallest TP size, single-stream tok/s and per-token latency, start-up.

    python -m experiments.studies.tp_scaling run OUT_DIR qwen3-8b:1,2,4 qwen3-32b:2,4 [--experiments bench
    latency]
        [-- OVERRIDE ...]
    python -m experiments.studies.tp_scaling table DIR [DIR ...]

`run` skips jobs whose `results.json` already exists under OUT_DIR (a device call has a time limit: run the
jobs over several calls into one directory), and prints the table of what OUT_DIR holds. `table` reads every
job under the directories given (the outputs of several calls).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

EXPERIMENTS = ("bench", "latency")


def job_name(model: str, tensor_parallel_size: int, experiment: str) -> str:
    return f"{model}-tp{tensor_parallel_size}-{experiment}"


def job_command(model: str, tensor_parallel_size: int, experiment: str, job_dir: Path, overrides: list[str]):
    parallel = "single" if tensor_parallel_size == 1 else f"tp{tensor_parallel_size}"
    return [
        sys.executable,
        "-m",
        "nvllm.run",
        f"+experiment={experiment}",
        f"model={model}",
        f"parallel={parallel}",
        "model.path=null",
        f"hydra.run.dir={job_dir}",
        *overrides,
    ]


def run_jobs(
    out_dir: Path, plan: dict[str, list[int]], experiments: list[str], overrides: list[str], timeout_s: float
) -> None:
    for model, sizes in plan.items():
        for tensor_parallel_size in sizes:
            for experiment in experiments:
                job_dir = out_dir / job_name(model, tensor_parallel_size, experiment)
                if (job_dir / "results.json").is_file():
                    continue
                command = job_command(model, tensor_parallel_size, experiment, job_dir, overrides)
                print("$", " ".join(command), flush=True)
                try:
                    returncode = subprocess.run(command, timeout=timeout_s).returncode
                except subprocess.TimeoutExpired:
                    returncode = f"a timeout after {timeout_s:.0f}s"
                if returncode != 0:
                    print(f"{job_dir.name} failed ({returncode}); the table leaves it out", file=sys.stderr)


def read_results(directories: list[Path]) -> dict[tuple[str, int, str], dict]:
    """(model preset, TP size, experiment) -> metrics, for every job found under `directories`."""
    results = {}
    for directory in directories:
        for path in sorted(directory.rglob("results.json")):
            job = json.loads(path.read_text())
            config = job["config"]
            target = config["runner"]["_target_"]
            experiment = target.removeprefix("experiments.runners.").removesuffix(".run")
            key = (config["model"]["name"], config["parallel"]["tensor_parallel_size"], experiment)
            results[key] = job["metrics"]
    return results


def table(results: dict[tuple[str, int, str], dict]) -> str:
    """One row per (model, TP size). Speed-up and efficiency are bench throughput against the model's
    smallest TP size in the results: efficiency = speed-up / (TP size / smallest TP size)."""
    header = (
        "| model | TP | bench tok/s | speed-up | scaling efficiency | single-stream tok/s | token p50 ms | "
        "TTFT ms | start-up s (bench) |"
    )
    lines = [header, "| " + " | ".join("---" for _ in range(header.count("|") - 1)) + " |"]
    models = sorted({model for model, _, _ in results})
    for model in models:
        sizes = sorted({size for name, size, _ in results if name == model})
        base = next((size for size in sizes if (model, size, "bench") in results), None)
        for size in sizes:
            bench, latency = results.get((model, size, "bench")), results.get((model, size, "latency"))
            cells = [model, str(size)]
            if bench is not None and base is not None:
                speedup = bench["output_tok_per_s"] / results[(model, base, "bench")]["output_tok_per_s"]
                efficiency = speedup / (size / base)
                cells += [f"{bench['output_tok_per_s']:,.0f}", f"{speedup:.2f}×", f"{efficiency:.0%}"]
            else:
                cells += ["", "", ""]
            if latency is not None:
                cells += [
                    f"{latency['output_tok_per_s']:,.1f}",
                    f"{latency['token_latency_p50_ms']:.2f}",
                    f"{latency['time_to_first_token_ms']:.1f}",
                ]
            else:
                cells += ["", "", ""]
            cells.append(f"{bench['startup_s']:.1f}" if bench is not None else "")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_plan(items: list[str]) -> dict[str, list[int]]:
    """`qwen3-8b:1,2,4` -> {"qwen3-8b": [1, 2, 4]}"""
    plan = {}
    for item in items:
        model, _, sizes = item.partition(":")
        if not sizes:
            raise SystemExit(f"{item!r}: expected MODEL:TP[,TP...], e.g. qwen3-8b:1,2,4")
        plan[model] = [int(size) for size in sizes.split(",")]
    return plan


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    overrides = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m experiments.studies.tp_scaling", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the jobs not done yet, then print the table")
    run.add_argument("out_dir", type=Path)
    run.add_argument("plan", nargs="+", help="MODEL:TP[,TP...], e.g. qwen3-8b:1,2,4")
    run.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    run.add_argument("--timeout", type=float, default=1800, help="seconds a job may take")
    show = commands.add_parser("table", help="the table of the jobs under the directories")
    show.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        run_jobs(args.out_dir, parse_plan(args.plan), args.experiments, overrides, args.timeout)
        directories = [args.out_dir]
    else:
        directories = args.dirs
    print(table(read_results(directories)))


if __name__ == "__main__":
    main()
