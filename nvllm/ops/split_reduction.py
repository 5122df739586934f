"""A reduction split over several programs, summed without any program waiting for another: the skinny
matmul's (`nvllm.ops.skinny_matmul`) way to put more programs on a few tokens' narrow outputs.

Each program of a tile of output writes its partial sum (fp32) to a workspace and counts itself in on the
tile's counter; the last to arrive adds the tile's partials in split order, so that the sum does not depend
on the order of arrival, and sets the counter back to zero for the next launch. The counters are shared by
every launch on a device: kernels on the model's stream run one after another, and under programmatic
dependent launch a program counts only after its wait for the kernel before.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

MAX_TILES = 2**16  # tiles of output a split launch may have (the counters')


@functools.cache
def tile_counters(device: torch.device) -> torch.Tensor:
    """The counters of `device`'s split launches, one a tile of output, zeros between launches."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("the split reduction's counters are made outside a capture: warm up first")
    return torch.zeros(MAX_TILES, dtype=torch.int32, device=device)


def split_workspace(
    like: torch.Tensor, tiles: int, splits: int, rows: int, columns: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The partial sums' workspace `[tiles, splits, rows, columns]` (fp32, unwritten) and the counters for a
    launch of `tiles` tiles of `rows x columns` outputs on `like`'s device."""
    assert tiles <= MAX_TILES, f"{tiles} tiles of output, more than the {MAX_TILES} counters"
    return like.new_empty((tiles, splits, rows, columns), dtype=torch.float32), tile_counters(like.device)


@triton.jit
def add_split_partials(
    acc,
    tile_partials_ptr,
    counter_ptr,
    split,
    SPLITS: tl.constexpr,
    ROWS: tl.constexpr,
    COLUMNS: tl.constexpr,
):
    """`acc` `[ROWS, COLUMNS]`, this program's partial sum of its tile (split `split` of `SPLITS`), written at
    `tile_partials_ptr` (the tile's `[SPLITS, ROWS, COLUMNS]` of the workspace); for the last of the tile's
    programs to arrive at `counter_ptr`, the tile's whole sum and True, else False."""
    tile = tl.arange(0, ROWS)[:, None] * COLUMNS + tl.arange(0, COLUMNS)[None, :]
    tl.store(tile_partials_ptr + split * ROWS * COLUMNS + tile, acc)
    tl.debug_barrier()  # every thread's partial written before the count that releases them
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    last = arrived == SPLITS - 1
    if last:
        acc = tl.zeros((ROWS, COLUMNS), dtype=tl.float32)
        for other in range(0, SPLITS):
            acc += tl.load(tile_partials_ptr + other * ROWS * COLUMNS + tile, cache_modifier=".cg")
        tl.atomic_xchg(counter_ptr, 0, sem="relaxed", scope="gpu")  # for the next launch
    return acc, last
