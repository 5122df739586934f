"""`nvllm COMMAND ...`: the experiment harness's command line (installed as the `nvllm` console script).

    nvllm run [OVERRIDES]          one experiment, or a sweep with -m (= python -m nvllm.run)
    nvllm summarize SWEEP_DIR      rebuild a sweep's summary table and plot, complete or not
    nvllm compare DIR_A DIR_B      two runs or two sweeps side by side
    nvllm visualize RUN_DIR        a run's timeline (= python -m nvllm.visualize; --follow: a run going on)

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
}
COMPLETION_FLAGS = ("-sc", "--shell-completion")


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


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in COMPLETION_FLAGS:
        return complete(args)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        raise SystemExit(0 if args else 2)
    command, rest = args[0], args[1:]
    handlers = {"run": run, "summarize": summarize, "compare": compare, "visualize": visualize}
    if command not in handlers:
        raise SystemExit(f"nvllm: unknown command {command!r}\n\n{usage()}")
    try:
        handlers[command](rest)
    except ValueError as error:  # a dir that is no run or sweep, a key the sweep does not vary
        raise SystemExit(f"nvllm {command}: {error}") from None
