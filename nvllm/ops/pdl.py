"""Programmatic dependent launch (PDL, Hopper and later) for the engine's Triton kernels.

On a stream, and in a CUDA graph, a kernel normally starts only when the kernel before it has finished: its
grid is torn down, the next one set up and its programs placed, and for that time the GPU computes nothing.
A decode step launches a few hundred kernels, so these gaps add up. A kernel launched with PDL may start
as soon as every program of the kernel before it has started and said so. Each of ours does both things
first thing (`overlap_prior_kernel`): it lets the next kernel start, then waits until the kernel before it
has finished and its writes are visible. Only then does it read or write memory. What overlaps is the
launch and the set-up of the programs, never the work, so the results are those of serialized kernels.
A kernel that is not ours (cuBLAS', inductor's) is launched as before and serializes as before.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # a Triton without grid dependency control: PDL stays off (`pdl_launch`)
    gdc_launch_dependents = gdc_wait = None


@triton.jit
def overlap_prior_kernel(PDL: tl.constexpr):
    """A kernel's first statement: wait for the prior kernel to finish, then let the next one launch. In this
    order only one kernel waits ahead of the running one: a chain of waiting kernels would hold the SMs'
    slots that the running kernel's programs need."""
    wait_for_prior_kernel(PDL)
    launch_next_kernel(PDL)


@triton.jit
def launch_next_kernel(PDL: tl.constexpr):
    """Let the next kernel on the stream launch (once every program of this one has said so)."""
    if PDL:
        gdc_launch_dependents()


@triton.jit
def wait_for_prior_kernel(PDL: tl.constexpr):
    """Wait until the kernel before this one has finished and its writes are visible. A kernel that reads
    memory before this may read only what no kernel of the step writes (weights)."""
    if PDL:
        gdc_wait()


@triton.jit
def prefetch_to_l2(pointers):
    """Ask for the 128-byte lines at `pointers` to be brought into the L2 (no registers written, no wait)."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [pointers], dtype=tl.int32, is_pure=False, pack=1
    )


@functools.cache
def _supported(device_index: int) -> bool:
    return gdc_wait is not None and torch.cuda.get_device_capability(device_index)[0] >= 9


def pdl_launch(device: torch.device) -> dict:
    """A launch's keyword arguments for a kernel that starts with `overlap_prior_kernel(PDL)`: launched with
    PDL where the GPU has it (compute capability 9.0 and later)."""
    if device.type == "cuda" and _supported(
        torch.cuda.current_device() if device.index is None else device.index
    ):
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}
