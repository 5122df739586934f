"""Probe (run `8b-trace`): a Triton tiled matmul for 64-256 rows against cuBLAS on the 8B's shapes.
Variants: pointer loads ("ptr") and TMA descriptors ("tma"; its WS flag is always off: Triton 3.6 compiles warp_specialize to the same code on Hopper)."""
import itertools, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from functools import partial

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def mm_ptr(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    pid_m = pid % grid_m
    pid_n = pid // grid_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    xp = x_ptr + rm[:, None] * K + rk[None, :]
    wp = w_ptr + rn[:, None] * K + rk[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        a = tl.load(xp, mask=rm[:, None] < M, other=0.0)
        b = tl.load(wp, mask=rn[:, None] < N, other=0.0)
        acc += tl.dot(a, tl.trans(b))
        xp += BK
        wp += BK
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def mm_tma(x_desc, w_desc, y_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           WS: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    pid_m = pid % grid_m
    pid_n = pid // grid_m
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=WS):
        a = x_desc.load([pid_m * BM, k])
        b = w_desc.load([pid_n * BN, k])
        acc += tl.dot(a, b.T)
    y_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


def run(kind, x, w, y, cfg):
    bm, bn, bk, warps, stages, ws = cfg
    m, k = x.shape
    n = w.shape[0]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    if kind == "ptr":
        mm_ptr[grid](x, w, y, m, n, k, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages)
    else:
        xd = TensorDescriptor.from_tensor(x, [bm, bk])
        wd = TensorDescriptor.from_tensor(w, [bn, bk])
        yd = TensorDescriptor.from_tensor(y, [bm, bn])
        mm_tma[grid](xd, wd, yd, m, n, k, BM=bm, BN=bn, BK=bk, WS=ws, num_warps=warps, num_stages=stages)
    return y


PTR = [(bm, bn, bk, w, s, False) for bm, bn, bk, w, s in
       itertools.product((64, 128), (64, 128, 256), (64, 128), (4, 8), (3, 4))]
TMA = [(bm, bn, bk, w, s, ws) for bm, bn, bk, w, s, ws in
       itertools.product((64, 128), (64, 128, 256), (64, 128), (4, 8), (3, 4), (False,))]
TRIALS = [("ptr", c) for c in PTR] + [("tma", c) for c in TMA]


def compile_one(trial):
    kind, cfg = trial
    x = torch.zeros(256, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.zeros(1024, 1024, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(256, 1024, device="cuda", dtype=torch.bfloat16)
    try:
        run(kind, x, w, y, cfg)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{kind} {cfg}: {type(e).__name__} {str(e).splitlines()[0][:120]}"


if __name__ == "__main__":
    import tall_probe as me
    if sys.argv[1:2] == ["compile"]:
        jobs = int(sys.argv[2])
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            errs = [e for e in pool.map(me.compile_one, TRIALS) if e]
        print(len(TRIALS), "trials,", len(errs), "failed to compile/run"); print("\n".join(errs[:12]))
        sys.exit()
    from experiments.kernels.skinny_matmul_bench import time_us
    bad = {t for t in TRIALS if me.compile_one(t)}
    good = [t for t in TRIALS if t not in bad]
    shapes = [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 24576, 4096), ("down", 4096, 12288),
              ("lm_head", 151936, 4096)]
    rows = [int(r) for r in sys.argv[1].split(",")] if sys.argv[1:] else [64, 128, 192, 256]
    torch.manual_seed(0)
    for name, n, k in shapes:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
        for m in rows:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(x, w)
            cub = time_us(partial(F.linear, x, w))
            best = {}
            for kind, cfg in good:
                run(kind, x, w, y, cfg)
                if not torch.allclose(y.float(), ref.float(), atol=2e-2, rtol=2e-2):
                    print("WRONG", kind, cfg, (y.float() - ref.float()).abs().max().item()); continue
                us = time_us(partial(run, kind, x, w, y, cfg))
                if kind not in best or us < best[kind][0]:
                    best[kind] = (us, cfg)
            gb = n * k * 2 / 1e9
            tf = 2 * m * n * k / 1e12
            line = f"{name} {n}x{k} M={m}: cublas {cub:.1f}us ({gb/cub*1e3:.2f} TB/s, {tf/cub*1e3:.0f} TF/s)"
            for kind, (us, cfg) in best.items():
                line += f" | {kind} {us:.1f}us {cfg} ({gb/us*1e3:.2f} TB/s, {tf/us*1e3:.0f} TF/s, {cub/us:.3f}x)"
            print(line, flush=True)
