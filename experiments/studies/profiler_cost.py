"""The profiler's cost: bench throughput with profiling off and on, engines alternated in one process (the
machine varies between calls more than the profiler costs). `python -m experiments.studies.profiler_cost
[--rounds N] [OVERRIDE ...]` (overrides as for `python -m nvllm.run +experiment=bench`)."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from experiments.harness.config import engine_config_from_run_config, workload_config
from experiments.harness.engine import start_engine, timed_generate, warm_up
from experiments.harness.workload import make_requests
from nvllm.run import compose_config


def bench_throughput(overrides: list[str], profile: bool) -> float:
    cfg = compose_config(["+experiment=bench", f"profile.enabled={str(profile).lower()}", *overrides])
    with start_engine(engine_config_from_run_config(cfg)) as llm:
        prompts, params = make_requests(workload_config(cfg), len(llm.tokenizer))
        warm_up(llm)
        llm.profiler.reset()
        _, metrics = timed_generate(llm, prompts, params, use_tqdm=False)
    return metrics["output_tok_per_s"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m experiments.studies.profiler_cost", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs of engines (default 2)")
    parser.add_argument("--output", type=Path, help="also write the numbers to this JSON file")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. model=qwen3-8b")
    args = parser.parse_args(argv)
    throughput: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            throughput[mode].append(bench_throughput(args.overrides, profile=mode == "on"))
            print(f"profiling {mode}: {throughput[mode][-1]:.1f} output tok/s", flush=True)
    off, on = (statistics.median(throughput[mode]) for mode in ("off", "on"))
    result = {"off_tok_per_s": throughput["off"], "on_tok_per_s": throughput["on"], "cost": 1 - on / off}
    print(
        f"median off {off:.1f} tok/s, on {on:.1f} tok/s: profiling costs {result['cost']:.1%} of throughput"
    )
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
