"""Start-up to the first generated token, each start in a fresh process:

- cold: empty inductor and Triton caches (new `TORCHINDUCTOR_CACHE_DIR` and `TRITON_CACHE_DIR`);
- warm: the caches the cold start filled;
- portable: empty caches again, but the portable cache-artifacts file (`compile.cache_artifacts`) that a
  start on the warm caches wrote;
- next engine: a second engine built in the cold start's process after the first one shut down.

    python -m experiments.studies.startup model=qwen3-0.6b                 # the device it finds
    python -m experiments.studies.startup model=qwen3-8b runs=3            # ranges over 3 rounds
    python -m experiments.studies.startup model=tiny device=cpu max_num_seqs=8
    python -m experiments.studies.startup model=qwen3-0.6b portable=False   # cold, warm and next engine only

`model=` is a preset (random weights) or a checkpoint directory; `runs=N` repeats every start N times;
`portable=False` leaves out the starts from a portable cache file;
every other `key=value` goes to `LLM(...)` (nano-vLLM's names or `group__key`). The engine compiles
(`enforce_eager=False`) unless told otherwise. Prints one table: time from launching the process to the
first token, and its parts (imports, building the engine: load / compile / capture, the first token).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = list(range(1000, 1016))  # token ids: no tokenizer work in the timed path


def parse_overrides(arguments: list[str]) -> dict:
    overrides = {}
    for argument in arguments:
        key, separator, text = argument.partition("=")
        if not separator:
            raise SystemExit(f"expected key=value, got {argument!r}")
        try:
            overrides[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            overrides[key] = text  # a bare word: a preset name, a device, a path
    return overrides


def child(launched_at: float, overrides: dict, next_engine: bool) -> dict:
    """One start in this (fresh) process: wall-clock times from `launched_at`, when the parent launched it."""
    timings = {"python_s": time.time() - launched_at}
    from nvllm import LLM, SamplingParams

    timings["import_s"] = time.time() - launched_at - timings["python_s"]
    params = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)

    def first_token() -> dict:
        from torch._dynamo.utils import counters

        counters.clear()
        start = time.time()
        with LLM(**overrides) as llm:
            built = time.time()
            llm.generate([PROMPT], params, use_tqdm=False)
            done = time.time()
            stats = llm.stats()
        parts = {name: stats[name] for name in ("load_s", "compile_s", "capture_s")}
        compiled = {  # dynamo's graphs, and inductor's: compiled, or found in its cache
            "dynamo_graphs": counters["stats"]["unique_graphs"],
            "inductor_compiled": counters["inductor"]["fxgraph_cache_miss"],
            "inductor_cached": counters["inductor"]["fxgraph_cache_hit"],
        }
        times = {"engine_s": built - start, "first_token_s": done - built, "finished_at": done}
        return {**times, **parts, **compiled}

    timings.update(first_token())
    timings["total_s"] = timings.pop("finished_at") - launched_at
    if next_engine:
        again = first_token()
        again.pop("finished_at")
        timings["next"] = {**again, "total_s": again["engine_s"] + again["first_token_s"]}
    return timings


def start(overrides: dict, caches: Path, name: str, next_engine: bool = False) -> dict:
    """One start in a fresh process whose inductor and Triton caches are under `caches`, reported as it
    ends (a run cut short by a time limit still shows the starts it made)."""
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "TRITON_CACHE_DIR": str(caches / "triton"),
    }
    launched_at = time.time()
    argv = [
        sys.executable,
        "-m",
        "experiments.studies.startup",
        "--child",
        str(launched_at),
        json.dumps(overrides),
    ]
    if next_engine:
        argv.append("--next-engine")
    result = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode:
        raise SystemExit(f"the start-up child failed (exit {result.returncode}); its stderr is above")
    timings = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"{name}: {timings['total_s']:.1f} s to the first token", flush=True)
    return timings


def spread(values: list[float]) -> str:
    low, high = min(values), max(values)
    if all(isinstance(value, int) for value in values):
        return str(low) if low == high else f"{low}–{high}"
    return f"{low:.1f}" if high - low < 0.05 else f"{low:.1f}–{high:.1f}"


def table(rows: dict[str, list[dict]]) -> str:
    columns = [
        ("launch → first token, s", "total_s"),
        ("python + imports, s", None),
        ("engine, s", "engine_s"),
        ("load", "load_s"),
        ("compile", "compile_s"),
        ("capture", "capture_s"),
        ("first token, s", "first_token_s"),
        ("dynamo graphs", "dynamo_graphs"),
        ("inductor: compiled / cached", "inductor_compiled"),
    ]
    lines = [
        "| start | " + " | ".join(name for name, _ in columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for name, runs in rows.items():
        cells = []
        for _, key in columns:
            if key is None:
                values = [run["python_s"] + run["import_s"] for run in runs if "import_s" in run]
            elif key == "inductor_compiled":
                cells.append(", ".join(sorted({f"{run[key]} / {run['inductor_cached']}" for run in runs})))
                continue
            else:
                values = [run[key] for run in runs]
            cells.append(spread(values) if values else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(arguments: list[str]) -> None:
    overrides = {"model": "qwen3-0.6b", "enforce_eager": False, **parse_overrides(arguments)}
    runs = int(overrides.pop("runs", 1))
    with_portable = bool(overrides.pop("portable", True))
    rows: dict[str, list[dict]] = {"cold": [], "warm": [], "portable cache": [], "next engine": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="nvllm-startup-") as scratch:
            local, portable = Path(scratch, "local"), Path(scratch, "portable")
            artifacts = str(Path(scratch, "artifacts.bin"))
            cold = start(overrides, local, "cold", next_engine=True)
            rows["cold"].append(cold)
            rows["next engine"].append(cold["next"])
            rows["warm"].append(start(overrides, local, "warm"))
            if with_portable:
                with_artifacts = {**overrides, "compile__cache_artifacts": artifacts}
                start(with_artifacts, local, "warm, writing the portable cache file")
                rows["portable cache"].append(start(with_artifacts, portable, "portable cache"))
    import torch  # only for the header: the children did the work

    device = overrides.get("device", "auto")
    print(f"\nstart-up of {overrides['model']} (torch {torch.__version__}, device={device}), {runs} run(s)")
    rows = {name: runs_ for name, runs_ in rows.items() if runs_}
    print(table(rows))
    print(json.dumps({name: runs_ for name, runs_ in rows.items()}, indent=None))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        launched_at, overrides = float(sys.argv[2]), json.loads(sys.argv[3])
        print(json.dumps(child(launched_at, overrides, next_engine="--next-engine" in sys.argv)))
    else:
        main(sys.argv[1:])
