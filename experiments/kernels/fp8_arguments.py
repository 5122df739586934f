"""The kernel benchmarks' fp8 flags: `--fp8` (weights in fp8 with a scale per row) and `--move-bits` (the
kernels convert them by moving bits, `nvllm.ops.e4m3_to_bf16`), set once for every kernel the run compiles;
for the MoE benches also `--fp8-activations` (fp8 experts multiplying fp8 activations,
`nvllm.ops.moe_fp8_triton`), `--gate-up-bf16` (fp8 experts' gate/up reading its bf16 input as it is,
not as fp16 rows: `nvllm.ops.moe_triton.GATE_UP_IN_FP16` off), `--down-fp16` (down reading its input as
fp16 rows: `nvllm.ops.moe_triton.DOWN_IN_FP16` on) and `--pairs-fp32` (down writing the pairs' outputs in
fp32, not bf16: `nvllm.ops.moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE` off)."""

from __future__ import annotations

import argparse

from nvllm.ops import e4m3_to_bf16


def add_fp8_arguments(parser: argparse.ArgumentParser, weights: str, activations: bool = False) -> None:
    """`--fp8` and `--move-bits` on `parser`, and `--fp8-activations` where `activations`; `weights`: what
    is in fp8, for the help."""
    parser.add_argument("--fp8", action="store_true", help=f"{weights} in fp8 with a scale per row")
    parser.add_argument("--move-bits", action="store_true", help="with --fp8: convert by moving bits")
    if activations:
        help = "with --fp8: the experts multiply fp8 activations (model.fp8_activations)"
        parser.add_argument("--fp8-activations", action="store_true", help=help)
        help = "with --fp8: gate/up reads bf16 activations as they are, not as fp16 rows"
        parser.add_argument("--gate-up-bf16", action="store_true", help=help)
        help = "with --fp8: down reads its bf16 input as fp16 rows, converted by a kernel of its own"
        parser.add_argument("--down-fp16", action="store_true", help=help)
        help = "down writes the pairs' outputs in fp32, not bf16 (moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE off)"
        parser.add_argument("--pairs-fp32", action="store_true", help=help)


def convert_as_asked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The conversion `--move-bits` asks for, set for this process (`--move-bits` and `--fp8-activations`
    need `--fp8`, and exclude each other: fp8 activations convert nothing)."""
    if args.move_bits and not args.fp8:
        parser.error("--move-bits converts fp8 weights: it needs --fp8")
    if getattr(args, "fp8_activations", False):
        if not args.fp8:
            parser.error("--fp8-activations multiplies fp8 experts: it needs --fp8")
        if args.move_bits:
            parser.error("--fp8-activations converts no weight: --move-bits does not apply")
    e4m3_to_bf16.ENABLED = args.move_bits
    if hasattr(args, "gate_up_bf16"):  # the MoE benches
        for flag, given in (("--gate-up-bf16", args.gate_up_bf16), ("--down-fp16", args.down_fp16)):
            if given and (not args.fp8 or args.fp8_activations):
                parser.error(f"{flag} converts fp8 experts for bf16 activations: it needs --fp8 alone")
        from nvllm.ops import moe_tiles, moe_triton  # Triton: the MoE benches have it

        moe_triton.GATE_UP_IN_FP16 = not args.gate_up_bf16
        moe_triton.DOWN_IN_FP16 = args.down_fp16
        moe_tiles.PAIR_OUTPUTS_IN_INPUT_DTYPE = not args.pairs_fp32
