"""Programmatic dependent launch (PDL, Hopper and later) for the engine's Triton kernels.

On a stream, and in a CUDA graph, a kernel normally starts only when the kernel before it has finished: its
grid is torn down, the next one set up and its programs placed, and for that time the GPU computes nothing.
A decode step launches a few hundred kernels, so these gaps add up. A kernel launched with PDL may start
as soon as every program of the kernel before it has said so (`launch_next_kernel`); it then waits
(`wait_for_prior_kernel`) until that kernel has finished and its writes are visible, and only then reads
what an earlier kernel wrote. So what overlaps is the next kernel's launch and set-up with the end of this
one, never the work, and the results are those of serialized kernels.

Each of ours waits first and only then lets the next kernel launch, so that at most one kernel waits ahead
of the running one: a chain of waiting kernels would hold SM slots that the running kernel's programs need.
A short kernel does both first thing (`overlap_prior_kernel`); the skinny matmul and decode attention let
the next kernel launch after their main loops, for the same reason. A kernel that is not ours (cuBLAS',
inductor's) is launched as before and serializes as before.
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
    """A short kernel's first statement: wait for the prior kernel to finish, then let the next one launch."""
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
    """A launch's keyword arguments for a kernel with a `PDL` constexpr that waits for the prior kernel before
    it reads what earlier kernels wrote: launched with PDL where the GPU has it (compute capability 9.0
    and later)."""
    if device.type == "cuda" and _supported(
        torch.cuda.current_device() if device.index is None else device.index
    ):
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}
