"""What a measurement was made with, recorded beside it in `results.json` and the wandb config: the
nvllm code (its git commit, read from where the imported package lies, whatever the working directory),
the libraries, the device, the host and the time."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

import nvllm

# distribution name -> module name, for builds installed without package metadata
LIBRARIES = {"torch": "torch", "flash-attn": "flash_attn", "triton": "triton", "transformers": "transformers"}


def _git(checkout: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def code_version() -> dict:
    """nvllm's version, and the commit of the checkout it was imported from: `git_dirty` when tracked files
    differ from it. Both None for an installed wheel (no checkout), or a package inside another repo."""
    package_dir = Path(nvllm.__file__).resolve().parent
    checkout = package_dir.parent
    is_checkout = _git(checkout, "rev-parse", "--show-toplevel") == str(checkout)
    commit = _git(checkout, "rev-parse", "HEAD") if is_checkout else None
    status = _git(checkout, "status", "--porcelain", "--untracked-files=no") if commit else None
    try:
        version = importlib.metadata.version("nvllm")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {
        "nvllm_version": version,
        "nvllm_path": str(package_dir),
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
    }


def library_version(distribution: str, module: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        if importlib.util.find_spec(module) is None:
            return None
        return getattr(importlib.import_module(module), "__version__", None)


def _cpu_name() -> str:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def available_cores() -> int:
    """The cores this process may run on (its affinity mask), which a container may set below the host's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def provenance(device: str) -> dict:
    """Everything about this job's code, libraries and machine, for `device` (the engine's, resolved)."""
    on_cuda = device.startswith("cuda")
    return {
        **code_version(),
        **{
            f"{name.replace('-', '_')}_version": library_version(name, module)
            for name, module in LIBRARIES.items()
        },
        "python_version": platform.python_version(),
        "device": device,
        "device_name": torch.cuda.get_device_name(torch.device(device)) if on_cuda else _cpu_name(),
        "cuda_device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "host": platform.node(),
        "host_cpu_count": os.cpu_count(),
        "available_cores": available_cores(),
        "torch_threads": torch.get_num_threads(),
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
