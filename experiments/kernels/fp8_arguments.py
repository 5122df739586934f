"""The kernel benchmarks' fp8 flags: `--fp8` (weights in fp8 with a scale per row) and `--move-bits` (the
kernels convert them by moving bits, `nvllm.ops.e4m3_to_bf16`), set once for every kernel the run compiles."""

from __future__ import annotations

import argparse

from nvllm.ops import e4m3_to_bf16


def add_fp8_arguments(parser: argparse.ArgumentParser, weights: str) -> None:
    """`--fp8` and `--move-bits` on `parser`; `weights`: what is in fp8, for the help."""
    parser.add_argument("--fp8", action="store_true", help=f"{weights} in fp8 with a scale per row")
    parser.add_argument("--move-bits", action="store_true", help="with --fp8: convert by moving bits")


def convert_as_asked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The conversion `--move-bits` asks for, set for this process (`--move-bits` needs `--fp8`)."""
    if args.move_bits and not args.fp8:
        parser.error("--move-bits converts fp8 weights: it needs --fp8")
    e4m3_to_bf16.ENABLED = args.move_bits
