"""Registers, spills and main-loop MMAs of the fp8-activation grouped matmuls (`nvllm.ops.moe_fp8_triton`) at
candidate prefill launch shapes, compiled for sm_90 on the CPU (Triton 3.6's ptxas):
`PYTHONPATH=. python experiments/results/2026-12-05-cpu-fp8-activation-wide-tiles/prefill_shapes_sass.py`."""

import tempfile
from pathlib import Path

from experiments.kernels.hopper_sass import (
    compile_for_hopper,
    disassemble,
    main_loop_instructions,
    resource_usage,
)
from nvllm.ops import moe_fp8_triton

POINTERS = ("a_ptr", "a_scale_ptr", "w_ptr", "w_scale_ptr", "out_ptr", "out_scale_ptr")
INTEGERS = ("num_pairs", "num_experts", "N", "K", "stride_am", "stride_as", "stride_we", "stride_wn")
INTEGERS += ("stride_se", "stride_om", "stride_os")


def report(gated: bool, block_m: int, block_n: int, block_k: int, warps: int, stages: int) -> None:
    types = ("*fp8e4nv", "*fp32", "*fp8e4nv", "*fp32", "*fp8e4nv" if gated else "*fp32", "*fp32")
    signature = dict(zip(POINTERS, types))
    signature |= {"sorted_pairs_ptr": "*i32", "tile_expert_ptr": "*i32", "pair_weights_ptr": "*bf16"}
    signature |= dict.fromkeys(INTEGERS, "i32")
    constants = dict(
        TOP_K=8, GATED=gated, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP=64, PDL=True
    )
    aligned = ("a_ptr", "w_ptr", "out_ptr", "N", "K", "stride_am", "stride_we", "stride_wn", "stride_om")
    kernel = compile_for_hopper(
        moe_fp8_triton._grouped_fp8_matmul_kernel, signature, constants, aligned, warps, stages
    )
    with tempfile.TemporaryDirectory() as directory:
        sass, usage = disassemble(kernel.asm["cubin"], Path(directory))
    loop = main_loop_instructions(sass)
    registers = resource_usage(usage)["REG"]
    spills = loop["STL"] + loop["LDL"] + loop["LDL.LU"]
    name = "gate/up" if gated else "down"
    print(
        f"{name:7s} {block_m:3d} pairs x ({block_n}, {block_k}, {warps}, {stages}): "
        f"{registers} registers, loop {sum(loop.values())} instructions a warp, QGMMA {loop['QGMMA.64']}, "
        f"spill loads and stores in the loop {spills}",
        flush=True,
    )


for block_m, block_n, warps in [
    (64, 64, 8),
    (64, 128, 8),
    (64, 256, 8),
    (128, 64, 8),
    (128, 128, 8),
    (64, 128, 4),
]:
    report(True, block_m, block_n, 128, warps, 3)
for block_m, block_n, warps in [(64, 128, 8), (64, 256, 8), (128, 128, 8), (128, 256, 8), (128, 128, 4)]:
    report(False, block_m, block_n, 64, warps, 3)
