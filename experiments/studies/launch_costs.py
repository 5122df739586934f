"""Host time a launch of each kind that a compiled prefill makes, launched from Python outside a CUDA graph:
cuBLAS through `F.linear` and through the `nvllm::linear` op, the `nvllm::add_rms_norm` op, and the two ops
in turn, four times each, inside one function compiled by `torch.compile(dynamic=True)` (inductor's code
calling them, as a decoder layer's region does); on CUDA also nvllm's add+RMSNorm Triton kernel launched
straight, and the Triton rows with programmatic dependent launch (PDL) and without. Each is called
`--calls` times back to back without waiting for the device (its kernels are a few microseconds: the host
is what is timed); mean µs a call. Without CUDA the same on the CPU, in fp32 (use small shapes there: the
CPU computes each call's matmul).

    python -m experiments.studies.launch_costs [--rows 64] [--width 1024] [--calls 500]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nvllm.ops.linear_ops import linear
from nvllm.ops.norm_ops import add_rms_norm as add_rms_norm_op


def host_us(call: Callable[[], object], calls: int, on_cuda: bool) -> float:
    for _ in range(20):
        call()
    if on_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    seconds = time.perf_counter() - start
    if on_cuda:
        torch.cuda.synchronize()
    return seconds / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    on_cuda, eps = torch.cuda.is_available(), 1e-6
    device, dtype = ("cuda", torch.bfloat16) if on_cuda else ("cpu", torch.float32)
    x = torch.randn(args.rows, args.width, device=device, dtype=dtype)
    residual, norm_weight = torch.randn_like(x), torch.ones(args.width, device=device, dtype=dtype)
    weight = torch.randn(args.width, args.width, device=device, dtype=dtype)

    def chain(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x, residual = add_rms_norm_op(x, residual, norm_weight, eps)
            x = linear(x, weight)
        return x

    compiled = torch.compile(chain, dynamic=True, fullgraph=True)
    kinds = {
        "F.linear": lambda: F.linear(x, weight),
        "nvllm::linear (the op, F.linear in it)": lambda: linear(x, weight),
        "nvllm::add_rms_norm (the op)": lambda: add_rms_norm_op(x, residual, norm_weight, eps),
        "the two ops compiled, per op": lambda: compiled(x, residual),
    }
    pdl_settings = [None]
    if on_cuda:
        from nvllm.ops import add_rms_norm as kernel_module
        from nvllm.ops import pdl

        kinds["add+RMSNorm Triton kernel"] = lambda: kernel_module.add_rms_norm(x, residual, norm_weight, eps)
        pdl_settings = [True, False]
    print(f"{args.rows} x {args.width} {dtype} on {device}, {args.calls} calls each; host µs a call:")
    for with_pdl in pdl_settings:
        if with_pdl is False:
            pdl._supported.cache_clear()
            supported, pdl._supported = pdl._supported, lambda device_index: False
        for name, call in kinds.items():
            if with_pdl is False and "linear" in name and "compiled" not in name:
                continue  # no Triton kernel of nvllm's: PDL changes nothing
            per_call = host_us(call, args.calls, on_cuda) / (8 if "compiled" in name else 1)
            launch = "" if with_pdl is None else f"PDL {'on ' if with_pdl else 'off'}"
            print(f"  {name:45s} {launch} {per_call:8.1f}")
        if with_pdl is False:
            pdl._supported = supported


if __name__ == "__main__":
    main()
