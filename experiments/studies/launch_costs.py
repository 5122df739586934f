"""Host time a launch of each kind that a compiled prefill makes, launched from Python outside a CUDA graph:
cuBLAS through `F.linear` and through the `nvllm::linear` custom op, nvllm's add+RMSNorm Triton kernel
straight and through its `nvllm::add_rms_norm` custom op, launched with programmatic dependent launch
(PDL) and without; and the two custom ops in turn, four times each, inside one function compiled by
`torch.compile(dynamic=True)` (inductor's code calling them, as a decoder layer's region does). Each is
launched `--calls` times back to back without waiting for the device (its
kernels are a few microseconds: the host is what is timed); mean µs a call.

    python -m experiments.studies.launch_costs [--rows 64] [--width 1024] [--calls 500]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nvllm.ops import add_rms_norm as kernel_module
from nvllm.ops import pdl
from nvllm.ops.linear_ops import linear
from nvllm.ops.norm_ops import add_rms_norm as add_rms_norm_op


def host_us(call: Callable[[], object], calls: int) -> float:
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    seconds = time.perf_counter() - start
    torch.cuda.synchronize()
    return seconds / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    x = torch.randn(args.rows, args.width, device="cuda", dtype=torch.bfloat16)
    residual, norm_weight = torch.randn_like(x), torch.ones(args.width, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(args.width, args.width, device="cuda", dtype=torch.bfloat16)
    kinds = {
        "F.linear (cuBLAS)": lambda: F.linear(x, weight),
        "nvllm::linear (custom op, cuBLAS)": lambda: linear(x, weight),
        "add+RMSNorm Triton kernel": lambda: kernel_module.add_rms_norm(x, residual, norm_weight, 1e-6),
        "nvllm::add_rms_norm (custom op, Triton)": lambda: add_rms_norm_op(x, residual, norm_weight, 1e-6),
    }

    def chain(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x, residual = add_rms_norm_op(x, residual, norm_weight, 1e-6)
            x = linear(x, weight)
        return x

    compiled = torch.compile(chain, dynamic=True, fullgraph=True)
    kinds["the two custom ops compiled, per op"] = lambda: compiled(x, residual)
    print(f"{args.rows} x {args.width} bf16, {args.calls} calls each; host µs a call:")
    for with_pdl in (True, False):
        if not with_pdl:
            pdl._supported.cache_clear()
            supported, pdl._supported = pdl._supported, lambda device_index: False
        for name, call in kinds.items():
            if "cuBLAS" in name and not with_pdl:
                continue  # no PDL in cuBLAS' launches
            per_call = host_us(call, args.calls) / (8 if "compiled" in name else 1)
            print(f"  {name:45s} PDL {'on ' if with_pdl else 'off'} {per_call:8.1f}")
        if not with_pdl:
            pdl._supported = supported


if __name__ == "__main__":
    main()
