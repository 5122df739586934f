"""`nvllm COMMAND ...`: the experiment harness's command line (installed as the `nvllm` console script).

    nvllm run [OVERRIDES]          one experiment, or a sweep with -m (= python -m nvllm.run)
    nvllm summarize SWEEP_DIR      rebuild a sweep's summary table and plot, complete or not
    nvllm compare DIR_A DIR_B      two runs or two sweeps side by side
    nvllm visualize RUN_DIR        a run's timeline (= python -m nvllm.visualize; --follow: a run going on)
    nvllm serve MODEL [OPTIONS]    an OpenAI-compatible server (the `serve` extra: pip install nvllm[serve])

Hydra's shell completion works through it: `eval "$(nvllm -sc install=bash)"`, then `nvllm run <TAB>`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys
from pathlib import Path

COMMANDS = {
    "run": "one experiment, or a sweep with -m (nvllm run --help: experiments, groups, keys)",
    "summarize": "rebuild a sweep's summary table and plot from its dir, complete or interrupted",
    "compare": "two runs or two sweeps side by side: medians, ranges, change",
    "visualize": "a run's timeline and profile (python -m nvllm.visualize)",
    "serve": "an OpenAI-compatible server for MODEL (a checkpoint dir or preset; key=value engine overrides)",
}
COMPLETION_FLAGS = ("-sc", "--shell-completion")
MAX_PORT = 65535


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: nvllm COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, summary in COMMANDS.items()]
    lines += ["", 'Shell completion: eval "$(nvllm -sc install=bash)" (or zsh), then nvllm run <TAB>.']
    return "\n".join(lines)


def run(args: list[str]) -> None:
    """Hydra's entry point with `args` as its command line, under the console script's name (which Hydra's
    completion script and help use)."""
    from nvllm.run import main as run_main

    sys.argv = [sys.argv[0], *args]
    run_main()


def complete(args: list[str]) -> None:
    """A shell-completion request: Hydra's completion script asks `nvllm -sc query=bash` with the line in
    $COMP_LINE. The command word is completed here, `run`'s arguments by Hydra (its line without `run`);
    the other commands take paths, which the shell completes when nothing is printed."""
    line = os.environ.get("COMP_LINE")
    if line is None or not any(arg.startswith("query=") for arg in args):  # install, uninstall
        return run(args)
    words = line.split()
    typing_command = len(words) == 1 and line.endswith(" ") or len(words) == 2 and not line.endswith(" ")
    if typing_command:
        prefix = words[1] if len(words) == 2 else ""
        print("\n".join(name for name in COMMANDS if name.startswith(prefix)))  # what shells read: lines
    elif len(words) >= 2 and words[1] == "run":
        os.environ["COMP_LINE"] = line.replace(" run", "", 1)
        run(args)


def summarize(args: list[str]) -> None:
    from experiments.harness.sweep_summary import summarize as summarize_sweep
    from experiments.harness.sweep_summary import summary_config

    parser = argparse.ArgumentParser(prog="nvllm summarize", description=COMMANDS["summarize"])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument(
        "--metric", help="the metric to tabulate and plot (default: the sweep's summary.metric)"
    )
    parser.add_argument("--x", help="the swept key along the x-axis (default: the first swept key)")
    parser.add_argument("--hue", help="the swept key that makes the lines (default: the second)")
    parser.add_argument("--y-from-data", action="store_true", help="fit the y-axis to the data, not from 0")
    parser.add_argument(
        "--wandb", action="store_true", help="also log a summary wandb run in the sweep's group"
    )
    options = parser.parse_args(args)
    y_from_zero = False if options.y_from_data else None
    config = summary_config(
        options.sweep_dir, metric=options.metric, x=options.x, hue=options.hue, y_from_zero=y_from_zero
    )
    print(summarize_sweep(options.sweep_dir, config, log_wandb=options.wandb))


def compare(args: list[str]) -> None:
    from experiments.harness.compare import compare as compare_dirs

    parser = argparse.ArgumentParser(prog="nvllm compare", description=COMMANDS["compare"])
    parser.add_argument("dir_a", type=Path)
    parser.add_argument("dir_b", type=Path)
    parser.add_argument("--metric", default="output_tok_per_s", help="for sweeps: the metric compared")
    options = parser.parse_args(args)
    print(compare_dirs(options.dir_a, options.dir_b, options.metric))


def visualize(args: list[str]) -> None:
    if importlib.util.find_spec("nvllm.visualize") is None:
        raise SystemExit("nvllm visualize: this nvllm has no visualizer (module nvllm.visualize is missing)")
    sys.argv = ["nvllm visualize", *args]
    runpy.run_module("nvllm.visualize", run_name="__main__", alter_sys=True)


def engine_overrides(pairs: list[str]) -> dict:
    """`key=value` words as `LLM` keyword overrides, values read as YAML (numbers, booleans, null)."""
    import yaml

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"engine override {pair!r} must be key=value (e.g. max_num_seqs=64)")
        overrides[key.replace(".", "__")] = yaml.safe_load(value)
    return overrides


def serve(args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="nvllm serve", description=COMMANDS["serve"])
    parser.add_argument("model", help="checkpoint dir or preset name (tiny, qwen3-0.6b, ...)")
    parser.add_argument(
        "overrides", nargs="*", default=[], help="engine overrides: key=value (max_num_seqs=64, ...)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", help="require `Authorization: Bearer KEY` on /v1 routes")
    parser.add_argument(
        "--engine-process",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="build and step the engine in a process of its own, so that the HTTP side never slows its steps "
        "(default); --no-engine-process: on a thread of the server's process",
    )
    options = parser.parse_intermixed_args(args)  # overrides before and after the options
    if not 1 <= options.port <= MAX_PORT:
        parser.error(f"argument --port: {options.port} is no TCP port (1 to {MAX_PORT})")
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        raise SystemExit("nvllm serve needs the serve extra: pip install 'nvllm[serve]'")
    from nvllm.serving.server import serve as serve_model

    overrides = engine_overrides(options.overrides)
    serve_model(
        options.model, options.host, options.port, options.api_key, options.engine_process, **overrides
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in COMPLETION_FLAGS:
        return complete(args)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        raise SystemExit(0 if args else 2)
    command, rest = args[0], args[1:]
    handlers = {
        "run": run,
        "summarize": summarize,
        "compare": compare,
        "visualize": visualize,
        "serve": serve,
    }
    if command not in handlers:
        raise SystemExit(f"nvllm: unknown command {command!r}\n\n{usage()}")
    try:
        handlers[command](rest)
    except ValueError as error:  # a dir that is no run or sweep, a key the sweep does not vary
        raise SystemExit(f"nvllm {command}: {error}") from None
