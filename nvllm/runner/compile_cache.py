"""Inductor's portable cache artifacts (`compile.cache_artifacts=PATH`): one file that holds what compiling
the engine's graphs produced (inductor's graphs, Triton kernels, autotuning choices). Loaded into the local
caches before anything compiles when the file exists, and written once the engine has compiled, so that a
file made on one machine makes every start-up warm on machines of the same kind (same torch, same GPU) even
with empty local caches."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def load_cache_artifacts(path: str | None) -> None:
    """Put the artifacts of `path` (if set and present) into inductor's and Triton's local caches."""
    if path is None or not os.path.exists(os.path.expanduser(path)):
        return
    file = Path(os.path.expanduser(path))
    # torch logs what its reader met and returns None for a file that is not its format
    if torch.compiler.load_cache_artifacts(file.read_bytes()) is None:
        raise ValueError(
            f"compile.cache_artifacts={path!r}: not a cache-artifacts file of this torch; delete it to make "
            "a new one"
        )


def save_cache_artifacts(path: str | None) -> None:
    """Write every artifact this process has compiled or loaded so far to `path` (if set), atomically."""
    if path is None:
        return
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:  # nothing compiled
        return
    file = Path(os.path.expanduser(path))
    file.parent.mkdir(parents=True, exist_ok=True)
    partial = file.with_name(f"{file.name}.{os.getpid()}.partial")
    partial.write_bytes(saved[0])
    os.replace(partial, file)
