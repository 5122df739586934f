"""Triton kernels checked on the CPU, in Triton's interpreter."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest


def run_in_interpreter(check: str) -> None:
    """`check` (Python code) in a process of its own with Triton's interpreter, which runs the kernels on
    the CPU (it must be chosen before triton is imported). Where triton is not installed (a CPU build of
    torch comes without it) the kernels cannot run at all, and the GPU tests check them instead."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton's interpreter needs triton, which a CPU build of torch does not install")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", check + "\nprint('checked')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and "checked" in result.stdout, result.stderr[-3000:]
