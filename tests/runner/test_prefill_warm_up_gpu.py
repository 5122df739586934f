"""Start-up's prefill warm-up on the GPU: once an engine has started, a prefill step of any size runs
kernels Triton has compiled, so that no compile lands in a user's first prompts or in a measured run. One
layer of each model's shapes, in the configurations the benchmarks run (Qwen3-30B-A3B with fp8 experts on
fp8 activations and the fp8 cache, compiled, and eager with the warm-up asked for; bf16; Qwen3-8B in bf16
and in fp8 with the fp8 cache). Each engine runs in a process of its own
(`tests.helpers.prefill_compiles_script`): a kernel compiled in a process stays compiled for every later
engine there, and Triton's hook counts a kernel loaded from its disk cache as one compiled.
`python -m pytest -m gpu tests/runner/test_prefill_warm_up_gpu.py`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

# Tokens of one prefill step each, of prompts of at most 200 tokens (more than 4 of them from 801 tokens:
# no prefill graph holds the step): odd and even, on both sides of the MoE bands' edges and of 1,024 tokens
# (fp8 activations from there), above a MoE sort by expert's chunks (1,024 tokens at 8 experts a token),
# and 11,755, the last prefill step of the 30B bench's first draw, whose 92 chunks of pairs (not a
# multiple of 16) had compiled the sort's kernel again.
STEP_TOKENS = [3, 77, 1000, 1024, 1500, 2479, 4096, 5000, 8200, 11755, 16001]

FP8 = dict(quantization="fp8", cache__dtype="fp8")


@pytest.mark.parametrize(
    "model, settings",
    [
        ("qwen3-30b-a3b", {**FP8, "model__fp8_activations": True}),
        # no prefill graphs: the ladder alone meets every launch shape
        (
            "qwen3-30b-a3b",
            {**FP8, "model__fp8_activations": True, "enforce_eager": True, "compile__prefill_warm_up": "on"},
        ),
        ("qwen3-30b-a3b", {}),
        ("qwen3-8b", {}),
        ("qwen3-8b", FP8),
    ],
    ids=["30b-bench", "30b-bench-eager", "30b-bf16", "8b-bf16", "8b-fp8"],
)
def test_after_start_up_prefill_steps_of_any_size_compile_no_triton_kernel(model, settings):
    settings = dict(model__num_hidden_layers=1, max_num_batched_tokens=16384, max_model_len=4096, **settings)
    script = "tests.helpers.prefill_compiles_script"
    command = [sys.executable, "-m", script, model, json.dumps(settings), json.dumps(STEP_TOKENS)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    assert counts["at_start_up"] is not None, "this Triton has no compile hook: nothing would be counted"
    compiled = counts["compiled"]
    assert compiled == [], f"compiled after start-up ({counts['at_start_up']} in it): {compiled}"
