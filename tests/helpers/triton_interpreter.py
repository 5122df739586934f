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


# Prepended to a check whose kernels round to float8 e4m3. The interpreter's fp32 -> e4m3 conversion drops
# the carry of a mantissa that rounds up (1.96 becomes 1.0, not 2.0) and does not saturate; the GPU's
# (`cvt.rn.satfinite`) rounds to nearest even, saturating, as torch's conversion of clamped values does.
# This gives the interpreter that conversion, so the check compares the kernel's arithmetic, not the bug.
E4M3_CONVERSION_AS_ON_THE_GPU = """
import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter as _interpreter

_interpreter_convert = _interpreter._convert_float


def _convert_float(input, input_dtype, output_dtype, rounding_mode):
    if output_dtype == tl.float8e4nv and input_dtype in (tl.float32, tl.float16):
        values = torch.from_numpy(np.ascontiguousarray(input)).float().clamp(-448, 448)
        return values.to(torch.float8_e4m3fn).view(torch.uint8).numpy().reshape(input.shape)
    return _interpreter_convert(input, input_dtype, output_dtype, rounding_mode)


_interpreter._convert_float = _convert_float
"""
