"""Probe (run `l2-prefetch`): does prefetching the next matmul's weight into the L2, while a latency-bound kernel
runs, make the matmul faster? 8B shapes at 1 and 16 rows, the skinny kernel in its table's configuration."""
import sys
from functools import partial

import torch
import triton
import triton.language as tl

from experiments.kernels.skinny_matmul_bench import graph_time_us, l2_evicting_read
from nvllm.ops.pdl import prefetch_to_l2
from nvllm.ops.skinny_matmul import skinny_config, skinny_matmul


@triton.jit
def _prefetch_kernel(ptr, num_lines, LINE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, num_lines, step):
        lines = start + tl.arange(0, BLOCK)
        prefetch_to_l2(tl.where(lines < num_lines, ptr + lines.to(tl.int64) * LINE, ptr))


@triton.jit
def _spin_kernel(out_ptr, ns):
    t = tl.full((32,), ns, tl.int32)
    r = tl.inline_asm_elementwise("nanosleep.u32 $1; mov.u32 $0, 0;", "=r,r", [t], dtype=tl.int32,
                                  is_pure=False, pack=1)
    tl.store(out_ptr + tl.arange(0, 32), r)


SINK = None


def spin(ns):
    _spin_kernel[(8,)](SINK, ns, num_warps=1)


def prefetch(w, nbytes, programs, block=256):
    lines = min(nbytes, w.numel() * w.element_size()) // 128
    _prefetch_kernel[(programs,)](w, lines, LINE=128 // w.element_size(), BLOCK=block, num_warps=4)


if __name__ == "__main__":
    SINK = torch.zeros(32, device="cuda", dtype=torch.int32)
    evict = l2_evicting_read()
    shapes = [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 24576, 4096), ("down", 4096, 12288)]
    t = lambda *fns: graph_time_us(lambda: [f() for f in fns])
    for ns in (0, 4000, 8000):
        base_spin = t(evict, partial(spin, ns)) if ns else t(evict)
        print(f"spin {ns} ns: evict+spin {base_spin:.1f} us", flush=True)
    for name, n, k in shapes:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for m in (1, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            mm = partial(skinny_matmul, x, w, skinny_config(n, k))
            hot = graph_time_us(mm)
            e = t(evict)
            cold = t(evict, mm) - e
            line = f"{name} {n}x{k} ({n*k*2/1e6:.1f} MB) M={m}: cold {cold:.1f} hot {hot:.1f}"
            for ns in (4000, 8000):
                s = t(evict, partial(spin, ns))
                plain = t(evict, partial(spin, ns), mm) - s
                line += f" | spin{ns//1000}us: mm {plain:.1f}"
                for mb in (8, 16, 32):
                    for programs in (132, 528):
                        pf = t(evict, partial(prefetch, w, mb << 20, programs), partial(spin, ns), mm)
                        pf_only = t(evict, partial(prefetch, w, mb << 20, programs), partial(spin, ns))
                        line += f" pf{mb}MB/{programs}: +{pf - s:.1f} (pf+spin {pf_only - e:.1f})"
            print(line, flush=True)
