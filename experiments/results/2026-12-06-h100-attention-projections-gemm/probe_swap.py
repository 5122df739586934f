import collections, sys, tempfile
from pathlib import Path
import triton, triton.language as tl
from experiments.kernels.hopper_sass import compile_for_hopper, disassemble, main_loop_instructions, resource_usage
from nvllm.ops.e4m3_to_bf16 import to_dot_dtype
from nvllm.ops.pdl import launch_next_kernel, wait_for_prior_kernel

@triton.jit
def swapped_kernel(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr, sorted_pairs_ptr, tile_expert_ptr,
    pair_weights_ptr, num_pairs, num_experts, N, K, stride_am, stride_we, stride_wn, stride_se, stride_om,
    A_ROW_DIVISOR: tl.constexpr, GATED: tl.constexpr, WEIGHTED: tl.constexpr, SCALED: tl.constexpr,
    A_SCALED: tl.constexpr, MOVE_BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior_kernel(PDL)
    tile = tl.program_id(0)
    expert = tl.load(tile_expert_ptr + tile)
    if expert >= num_experts:
        return
    pairs = tl.load(sorted_pairs_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    valid = pairs < num_pairs
    rows = pairs // A_ROW_DIVISOR
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = columns < N
    w_expert = w_ptr + expert.to(tl.int64) * stride_we
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_inside = ks < K
        a = tl.load(a_ptr + rows[None, :] * stride_am + ks[:, None], valid[None, :] & k_inside[:, None], 0.0)
        w_mask = inside[:, None] & k_inside[None, :]
        w = tl.load(w_expert + columns[:, None] * stride_wn + ks[None, :], w_mask, 0.0)
        acc = tl.dot(to_dot_dtype(w, a.dtype, MOVE_BITS), a, acc)
        if GATED:
            w_up = tl.load(w_expert + (columns[:, None] + N) * stride_wn + ks[None, :], w_mask, 0.0)
            acc_up = tl.dot(to_dot_dtype(w_up, a.dtype, MOVE_BITS), a, acc_up)
    launch_next_kernel(PDL)
    if SCALED:
        scales = w_scale_ptr + expert.to(tl.int64) * stride_se + columns
        acc = acc * tl.load(scales, inside, 0.0)[:, None]
        if GATED:
            acc_up = acc_up * tl.load(scales + N, inside, 0.0)[:, None]
    if A_SCALED:
        row_scale = tl.load(a_scale_ptr + rows, valid, 1.0)[None, :]
        acc = acc * row_scale
        if GATED:
            acc_up = acc_up * row_scale
    if GATED:
        acc = acc * tl.sigmoid(acc) * acc_up
    if WEIGHTED:
        acc = acc * tl.load(pair_weights_ptr + pairs, valid, 0.0).to(tl.float32)[None, :]
    out = out_ptr + pairs[None, :] * stride_om + columns[:, None]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), valid[None, :] & inside[:, None])

def build(gated, act, block_m, bn, bk, warps, stages, move_bits=False):
    sig = {"a_ptr": f"*{act}", "a_scale_ptr": "*fp32", "w_ptr": "*fp8e4nv", "w_scale_ptr": "*fp32",
        "out_ptr": "*bf16", "sorted_pairs_ptr": "*i32", "tile_expert_ptr": "*i32", "pair_weights_ptr": "*bf16",
        "num_pairs": "i32", "num_experts": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_we": "i32",
        "stride_wn": "i32", "stride_se": "i32", "stride_om": "i32"}
    const = dict(A_ROW_DIVISOR=8 if gated else 1, GATED=gated, WEIGHTED=not gated, SCALED=True,
        A_SCALED=act == "fp16", MOVE_BITS=move_bits, BLOCK_M=block_m, BLOCK_N=bn, BLOCK_K=bk, PDL=False)
    aligned = ("a_ptr", "w_ptr", "out_ptr", "N", "K", "stride_am", "stride_we", "stride_wn", "stride_om")
    return compile_for_hopper(swapped_kernel, sig, const, aligned, warps, stages)


import functools, itertools, math
import torch
from experiments.kernels import moe_tile_sweep as sw
from experiments.kernels.skinny_matmul_bench import time_us
from nvllm.ops import moe_triton
from nvllm.ops.moe_tiles import GroupedMatmulConfig

ORIGINAL = moe_triton._grouped_matmul_kernel
LAST = {}

class Recording:
    def __init__(self, kernel):
        self.kernel = kernel
    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            LAST["k"] = self.kernel[grid](*args, **kwargs)
            return LAST["k"]
        return launch

def use(kernel):
    moe_triton._grouped_matmul_kernel = Recording(kernel)

CONFIGS = [GroupedMatmulConfig(*c) for c in itertools.product((64, 128), (128, 256), (4,), (3, 4))] + [
    GroupedMatmulConfig(128, 128, 8, 3), GroupedMatmulConfig(128, 256, 8, 3), GroupedMatmulConfig(64, 64, 4, 4)]

if __name__ == "__main__":
    torch.manual_seed(0)
    for tokens in [int(t) for t in sys.argv[1].split(",")]:
        for name, gated in sw.MATMULS.items():
            run, block_m, touched = sw.matmul_of_batch(tokens, gated, "fp8")
            table = sw.table_config(tokens * 8, gated, "fp8")
            results = {}
            for label, kernel in (("current", ORIGINAL), ("swapped", swapped_kernel)):
                use(kernel)
                out = run.keywords["out"]
                run(config=table); torch.cuda.synchronize()
                results[label + "-out"] = out.clone()
                times = {}
                for config in ([table] + CONFIGS) if label == "swapped" else [table]:
                    try:
                        times[config] = time_us(functools.partial(run, config=config))
                        if config == table:
                            asm = LAST["k"].asm.get("ptx", "")
                            results[label + "-wgmma"] = "wgmma" in asm
                    except Exception as error:  # out of resources
                        continue
                results[label] = times
            diff = (results["current-out"].float() - results["swapped-out"].float()).abs().max().item()
            scale = results["current-out"].float().abs().max().item()
            for label in ("current", "swapped"):
                times = results[label]
                best = min(times, key=times.get)
                print(f"{tokens:5d} tokens {name:7s} tile {block_m} {label}: table {tuple(table.__dict__.values())} {times.get(table, math.nan):7.1f} us | best {tuple(best.__dict__.values())} {times[best]:7.1f} us | wgmma {results.get(label + '-wgmma')}", flush=True)
            print(f"      max |current - swapped| {diff:.3g} of max |out| {scale:.3g}", flush=True)
            use(ORIGINAL)
