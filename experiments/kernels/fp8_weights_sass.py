"""The matmul kernels that read weights, compiled for Hopper (sm_90) with no GPU, over bf16 and fp8 weights:
the skinny kernel (decode batches of dense models, `nvllm.ops.skinny_matmul`) at its table's launch shapes,
the skinny experts' two launches (a single stream of Qwen3-30B-A3B, `nvllm.ops.moe_skinny_triton`) and the
MoE grouped matmuls (`nvllm.ops.moe_triton`) at a single stream's and a prefill's, and the same over
fp8 activations (`nvllm.ops.moe_fp8_triton`, `model.fp8_activations`), whose operands are both e4m3 on
the fp8 tensor cores, as are those of the GEMM small dense batches run with that setting
(`nvllm.ops.fp8_gemm`'s small-batch kernel). Per kernel, the
main loop's instructions a warp, the weight bytes a program reads an iteration, the weight bytes an SM
gets from one warp instruction (the rate the loop can issue at), the registers a thread holds, and the
conversion instructions by opcode. An fp8 weight is half the bytes of a bf16 one; where its loop takes
several times the instructions, a kernel that was bound by memory can become bound by issue.

`python -m experiments.kernels.fp8_weights_sass` (needs a Triton with its NVIDIA backend; no GPU)"""

from __future__ import annotations

import collections
import re
import tempfile
from functools import partial
from pathlib import Path

from experiments.kernels.hopper_sass import (
    compile_for_hopper,
    disassemble,
    main_loop_instructions,
    resource_usage,
)
from nvllm.ops import fp8_gemm, moe_fp8_triton, moe_skinny_triton, moe_tiles, moe_triton, skinny_matmul

# opcodes that convert or move a weight's elements: on sm_90 Triton takes e4m3 to f16 by pairs, then each
# element to bf16 (F2FP, F2F: the conversion units); moving bits takes PRMT, SHF, LOP3 and HMUL2
CONVERSIONS = ("F2FP", "F2F.", "PRMT", "IMAD.MOV", "HMUL2", "SHF", "LOP3")

# a logic op that writes only a predicate: it tests a bit of a mask (which rows of a tile to load), and
# moves no element
PREDICATE_ONLY = re.compile(r"LOP3\.LUT P\d+, RZ,")


def converting_instructions(sass: str) -> collections.Counter:
    """The main loop's instructions that may convert or move an operand's elements (`CONVERSIONS`), by
    opcode; a logic op that writes only a predicate left out."""
    moving = "\n".join(line for line in sass.splitlines() if not PREDICATE_ONLY.search(line))
    loop = main_loop_instructions(moving)
    return collections.Counter({op: n for op, n in loop.items() if op.startswith(CONVERSIONS)})


def skinny(weight: str, n: int, k: int, gated: bool, move_bits: bool, activation: str = "bf16"):
    """The skinny kernel for an `n x k` weight (packed gate/up where `gated`) at its table's shape."""
    weight_bytes = 2 if weight == "bf16" else 1
    block_n, block_k, warps, stages = skinny_matmul.skinny_config(n, k, gated, weight_bytes)
    signature = {
        "x_ptr": f"*{activation}",
        "w_ptr": f"*{weight}",
        "y_ptr": f"*{activation}",
        "scale_ptr": "*fp32",
        "partials_ptr": "*fp32",
        "counters_ptr": "*i32",
        "num_rows": "i32",
        "n": "i32",
        "k": "i32",
        "x_row_stride": "i32",
        "w_row_stride": "i32",
        "y_row_stride": "i32",
    }
    constants = dict(
        BLOCK_M=skinny_matmul.MAX_ROWS,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        GATED=gated,
        SCALED=weight != "bf16",
        MOVE_BITS=move_bits,
        LINE=128 if weight != "bf16" else 64,
        PDL=True,
        SPLIT_K=1,
    )
    aligned = ("x_ptr", "w_ptr", "y_ptr", "n", "k", "x_row_stride", "w_row_stride", "y_row_stride")
    kernel = compile_for_hopper(
        skinny_matmul._skinny_matmul_kernel, signature, constants, aligned, warps, stages
    )
    return kernel, block_n * block_k * (2 if gated else 1), warps


def grouped(weight: str, gated: bool, pairs: int, move_bits: bool, activation: str = "bf16"):
    """A Qwen3-30B-A3B layer's gate/up (`gated`) or down grouped matmul at `pairs` pairs over 128 experts."""
    block_m = moe_tiles.row_tile(pairs, 128)
    config = moe_tiles.matmul_config(pairs, 128, gated, fp8=weight != "bf16")
    signature = {
        "a_ptr": f"*{activation}",
        "a_scale_ptr": "*fp32",
        "w_ptr": f"*{weight}",
        "w_scale_ptr": "*fp32",
        "out_ptr": "*bf16" if gated else "*fp32",
        "sorted_pairs_ptr": "*i32",
        "tile_expert_ptr": "*i32",
        "pair_weights_ptr": "*bf16",
        "num_pairs": "i32",
        "num_experts": "i32",
        "N": "i32",
        "K": "i32",
        "stride_am": "i32",
        "stride_we": "i32",
        "stride_wn": "i32",
        "stride_se": "i32",
        "stride_om": "i32",
    }
    constants = dict(
        A_ROW_DIVISOR=8 if gated else 1,
        GATED=gated,
        WEIGHTED=not gated,
        SCALED=weight != "bf16",
        A_SCALED=activation == "fp16",  # fp16 rows with a scale each (`nvllm.ops.fp16_rows`)
        MOVE_BITS=move_bits,
        BLOCK_M=block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        PDL=True,
    )
    aligned = ("a_ptr", "w_ptr", "out_ptr", "N", "K", "stride_am", "stride_we", "stride_wn", "stride_om")
    kernel = compile_for_hopper(
        moe_triton._grouped_matmul_kernel, signature, constants, aligned, config.num_warps, config.num_stages
    )
    return kernel, config.block_n * config.block_k * (2 if gated else 1), config.num_warps


def skinny_experts(weight: str, gated: bool, activation: str = "bf16"):
    """One token's gate/up (`gated`) or down launch of the skinny experts (`nvllm.ops.moe_skinny_triton`)
    over Qwen3-30B-A3B's experts, at the launch tables' shapes, the routing given. They multiply in fp32
    and always take Triton's conversion (`CUDA_CORE_KERNELS`)."""
    weight_bytes = 2 if weight == "bf16" else 1
    table = moe_skinny_triton.GATE_UP_LAUNCH if gated else moe_skinny_triton.DOWN_LAUNCH
    block_n, block_k, warps, stages = table[weight_bytes]
    pointers = {"w_ptr": f"*{weight}", "w_scale_ptr": "*fp32", "out_ptr": f"*{activation}"}
    routing = {"topk_weights_ptr": "*fp32", "topk_ids_ptr": "*i32"}
    launch = dict(SCALED=weight != "bf16", BLOCK_N=block_n, BLOCK_K=block_k)
    if gated:  # the kernels' parameters in their order: the constexprs are matched by position
        signature = {"x_ptr": f"*{activation}", **pointers, "logits_ptr": "*bf16", **routing}
        signature |= {"padding_ptr": "*i1"} | dict.fromkeys(("num_tokens", "N", "K"), "i32")
        strides = ("stride_x", "stride_logits", "stride_we", "stride_wn", "stride_se", "stride_out")
        signature |= dict.fromkeys(strides, "i32") | {"routed_weights_ptr": "*fp32", "routed_ids_ptr": "*i32"}
        constants = dict(NUM_EXPERTS=128, EXPERTS_POW2=128, TOP_K=8, TOP_K_POW2=8, RENORMALIZE=True)
        constants |= dict(ROUTE_HERE=False, HAS_PADDING=False, **launch, PDL=True)
        kernel_fn, aligned = moe_skinny_triton._skinny_gate_up_kernel, ("x_ptr", "stride_x")
    else:
        signature = {"a_ptr": f"*{activation}", **pointers, **routing}
        signature |= dict.fromkeys(("N", "K"), "i32")
        strides = ("stride_a", "stride_we", "stride_wn", "stride_se", "stride_out")
        signature |= dict.fromkeys(strides, "i32")
        constants = dict(TOP_K=8, TOP_K_POW2=8, **launch, PDL=True)
        kernel_fn, aligned = moe_skinny_triton._skinny_down_kernel, ("a_ptr", "stride_a")
    aligned += ("w_ptr", "out_ptr", "N", "K", "stride_we", "stride_wn", "stride_out")
    kernel = compile_for_hopper(kernel_fn, signature, constants, aligned, warps, stages)
    # a loop iteration of gate/up reads a gate and an up slice of one expert; of down, a slice of each of
    # the token's 8 experts
    return kernel, block_n * block_k * (2 if gated else 8), warps


def grouped_fp8_activations(
    gated: bool,
    pairs: int,
    config: moe_tiles.GroupedMatmulConfig | None = None,
    row_scales: bool | None = None,
):
    """`grouped`'s matmul at `pairs` pairs over fp8 activations (`nvllm.ops.moe_fp8_triton`): the gate/up
    matmul's input with a scale per token, the down matmul's with a scale per row where `row_scales`
    (gate/up then writes bf16), else per group; `row_scales` None: as the engine quantizes
    (`moe_tiles.FP8_INTERMEDIATE_PER_ROW`). At `config` where given, else its table's."""
    row_scales = moe_tiles.scales_per_row(row_scales)
    block_m = moe_tiles.row_tile(pairs, 128, quantized_activations=True, per_row=row_scales)
    _, table = moe_tiles.fp8_activation_table(row_scales)
    _, gate_up_config, down_config = table[moe_tiles.config_band(pairs, 128)]
    config = config or (gate_up_config if gated else down_config)
    signature = {
        "a_ptr": "*fp8e4nv",
        "a_scale_ptr": "*fp32",
        "w_ptr": "*fp8e4nv",
        "w_scale_ptr": "*fp32",
        "out_ptr": ("*bf16" if row_scales else "*fp8e4nv") if gated else "*fp32",
        "out_scale_ptr": "*fp32",
        "sorted_pairs_ptr": "*i32",
        "tile_expert_ptr": "*i32",
        "pair_weights_ptr": "*bf16",
        "num_pairs": "i32",
        "num_experts": "i32",
        "N": "i32",
        "K": "i32",
        "stride_am": "i32",
        "stride_as": "i32",
        "stride_we": "i32",
        "stride_wn": "i32",
        "stride_se": "i32",
        "stride_om": "i32",
        "stride_os": "i32",
    }
    constants = dict(
        TOP_K=8,
        GATED=gated,
        BLOCK_M=block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP=moe_tiles.FP8_INTERMEDIATE_GROUP,
        ROW_SCALES=row_scales,
        PROMOTED=moe_tiles.FP8_ACTIVATION_SUMS_IN_FP32,
        PDL=True,
    )
    aligned = ("a_ptr", "w_ptr", "out_ptr", "N", "K", "stride_am", "stride_we", "stride_wn", "stride_om")
    kernel = compile_for_hopper(
        moe_fp8_triton._grouped_fp8_matmul_kernel,
        signature,
        constants,
        aligned,
        config.num_warps,
        config.num_stages,
    )
    return kernel, config.block_n * config.block_k * (2 if gated else 1), config.num_warps


def small_batch_gemm(n: int, k: int):
    """`nvllm.ops.fp8_gemm`'s small-batch kernel against an `n x k` fp8 weight, in `small_batch_config`'s
    launch shape."""
    config = fp8_gemm.small_batch_config(n, k, 132)
    signature = dict.fromkeys(("a_ptr", "b_ptr"), "*fp8e4nv") | {"c_ptr": "*bf16"}
    signature |= dict.fromkeys(("a_scale_ptr", "b_scale_ptr"), "*fp32")
    signature |= dict.fromkeys(("M", "N", "K", "stride_am", "stride_bn", "stride_cm"), "i32")
    constants = dict(
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, TRANSPOSED=True, PDL=True
    )
    aligned = ("a_ptr", "b_ptr", "c_ptr", "N", "K", "stride_am", "stride_bn", "stride_cm")
    kernel = compile_for_hopper(
        fp8_gemm._fp8_gemm_kernel,
        signature,
        constants,
        aligned,
        config.num_warps,
        config.num_stages,
    )
    return kernel, config.block_n * config.block_k, config.num_warps


FP8_ACTIVATION_KERNELS = {
    "small-batch GEMM, Qwen3-8B q/k/v 6144x4096": partial(small_batch_gemm, 6144, 4096),
    "small-batch GEMM, Qwen3-8B o 4096x4096": partial(small_batch_gemm, 4096, 4096),
    "small-batch GEMM, Qwen3-8B gate/up 24576x4096": partial(small_batch_gemm, 24576, 4096),
    "small-batch GEMM, Qwen3-8B down 4096x12288": partial(small_batch_gemm, 4096, 12288),
    "small-batch GEMM, Qwen3-30B-A3B q/k/v 5120x2048": partial(small_batch_gemm, 5120, 2048),
    "small-batch GEMM, Qwen3-30B-A3B o 2048x4096": partial(small_batch_gemm, 2048, 4096),
    "grouped gate/up, 1 token (8 pairs)": partial(grouped_fp8_activations, gated=True, pairs=8),
    "grouped down, 1 token (8 pairs)": partial(grouped_fp8_activations, gated=False, pairs=8),
    "grouped gate/up, 256 tokens": partial(grouped_fp8_activations, gated=True, pairs=2048),
    "grouped down, 256 tokens": partial(grouped_fp8_activations, gated=False, pairs=2048),
    "grouped gate/up, prefill 2048 tokens": partial(grouped_fp8_activations, gated=True, pairs=16384),
    "grouped down, prefill 2048 tokens": partial(grouped_fp8_activations, gated=False, pairs=16384),
    "grouped gate/up, prefill 2048 tokens, in groups": partial(
        grouped_fp8_activations, gated=True, pairs=16384, row_scales=False
    ),
    "grouped gate/up, prefill 2048 tokens, in groups, two a tile": partial(
        grouped_fp8_activations,
        gated=True,
        pairs=16384,
        config=moe_tiles.GroupedMatmulConfig(128, 128, 8, 3),
        row_scales=False,
    ),
    "grouped down, prefill 2048 tokens, in groups": partial(
        grouped_fp8_activations, gated=False, pairs=16384, row_scales=False
    ),
}


KERNELS = {
    "skinny, Qwen3-8B q/k/v 6144x4096": partial(skinny, n=6144, k=4096, gated=False),
    "skinny, Qwen3-30B-A3B o 2048x4096": partial(skinny, n=2048, k=4096, gated=False),
    "skinny, Qwen3-8B o 4096x4096": partial(skinny, n=4096, k=4096, gated=False),
    "skinny, Qwen3-8B gate/up 2x12288x4096": partial(skinny, n=24576, k=4096, gated=True),
    "skinny, Qwen3-8B down 4096x12288": partial(skinny, n=4096, k=12288, gated=False),
    "skinny, Qwen3-30B-A3B q/k/v 5120x2048": partial(skinny, n=5120, k=2048, gated=False),
    "skinny experts gate/up, 1 token": partial(skinny_experts, gated=True),
    "skinny experts down, 1 token": partial(skinny_experts, gated=False),
    "grouped gate/up, 1 token (8 pairs)": partial(grouped, gated=True, pairs=8),
    "grouped down, 1 token (8 pairs)": partial(grouped, gated=False, pairs=8),
    "grouped gate/up, 256 tokens": partial(grouped, gated=True, pairs=2048),
    "grouped down, 256 tokens": partial(grouped, gated=False, pairs=2048),
    "grouped gate/up, prefill 2048 tokens": partial(grouped, gated=True, pairs=16384),
    "grouped down, prefill 2048 tokens": partial(grouped, gated=False, pairs=16384),
}
# the kernels that multiply on the CUDA cores in fp32, whose fp8 weights take Triton's conversion only
CUDA_CORE_KERNELS = ("skinny experts gate/up, 1 token", "skinny experts down, 1 token")
# (label, weight dtype, bits moved, activations' dtype): bf16 weights, fp8 by Triton's conversion, fp8 by
# `nvllm.ops.e4m3_to_bf16`; and fp8 weights against fp16 activations (the grouped matmuls' fp16 rows,
# `nvllm.ops.moe_triton.GATE_UP_IN_FP16` and `DOWN_IN_FP16`), for which sm_90 converts e4m3 pairs to f16 in
# one instruction and needs no second step to bf16
WEIGHTS = [
    ("bf16", "bf16", False, "bf16"),
    ("fp8", "fp8e4nv", False, "bf16"),
    ("fp8 bits", "fp8e4nv", True, "bf16"),
    ("fp8 f16", "fp8e4nv", False, "fp16"),
]


def report(name: str, label: str, kernel, weight_bytes: int, warps: int, scratch: Path) -> None:
    sass, usage = disassemble(kernel.asm["cubin"], scratch)
    registers = str(resource_usage(usage)["REG"])
    loop = main_loop_instructions(sass)
    total = sum(loop.values())
    converting = converting_instructions(sass)
    mma = {op: n for op, n in loop.items() if "MMA" in op}
    print(
        f"{name:38s} {label:8s}: loop {total:4d} instructions a warp x {warps} warps, "
        f"{weight_bytes // 1024:3d} KiB of weight, "
        f"{weight_bytes / (total * warps):5.1f} B a warp instruction, {registers:>3s} registers | "
        + ", ".join(f"{op} {n}" for op, n in sorted({**mma, **converting}.items())),
        flush=True,
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        for name, build in KERNELS.items():
            for label, weight, move_bits, activation in WEIGHTS:
                if name in CUDA_CORE_KERNELS:
                    if move_bits:  # they never move bits
                        continue
                    kernel, elements, warps = build(weight, activation=activation)
                else:
                    kernel, elements, warps = build(weight, move_bits=move_bits, activation=activation)
                weight_bytes = elements * (1 if weight == "fp8e4nv" else 2)
                report(name, label, kernel, weight_bytes, warps, Path(scratch))
        for name, build in FP8_ACTIVATION_KERNELS.items():
            kernel, elements, warps = build()
            report(name, "fp8 x fp8", kernel, elements, warps, Path(scratch))


if __name__ == "__main__":
    main()
