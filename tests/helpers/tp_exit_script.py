"""A user's script that never calls `shutdown()` on a tensor-parallel engine, run by the exit tests in a
subprocess: `python -m tests.helpers.tp_exit_script HOW DEVICE`. It generates, prints one JSON line (the
workers'
pids and the shared-memory segment) and then, depending on HOW:
- `return`: returns from `main()`, so the engine is collected there;
- `kept`: keeps the engine in a global, alive at interpreter exit;
- `killed`: SIGKILLs its own process, as a crash would (the workers must not outlive it).
DEVICE `cpu` runs the tiny model with gloo; `cuda` a random Qwen3-0.6B, compiled, with CUDA graphs and NCCL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from nvllm import LLM, SamplingParams

ENGINES = {
    "cpu": dict(model="tiny", enforce_eager=True, model__vocab_size=4096, num_kvcache_blocks=32),
    "cuda": dict(model="qwen3-0.6b", max_model_len=1024, gpu_memory_utilization=0.3),
}
kept: list[LLM] = []


def main(how: str, device: str) -> None:
    settings = dict(ENGINES[device])
    llm = LLM(settings.pop("model"), tensor_parallel_size=2, **settings)
    prompts = [[100 + i, 200 + i, 300 + i, 400 + i] for i in range(4)]
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    runner = llm.model_runner
    report = {"worker_pids": runner.worker_pids, "shm": runner.shm_name, "generated_at": time.time()}
    print(json.dumps(report), flush=True)
    if how == "kept":
        kept.append(llm)
    elif how == "killed":
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Exit:
    returncode: int
    stderr: str
    worker_pids: list[int]
    shm: str
    exit_s: float  # from the end of `generate` to the end of the process


def run(how: str, device: str, timeout_s: float) -> Exit:
    """Run the script; on a timeout, kill it and its workers (its own session) and fail."""
    command = [sys.executable, "-m", "tests.helpers.tp_exit_script", how, device]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as timeout:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        message = f"`{' '.join(command)}` still running after {timeout_s}s:\n{stdout}\n{stderr}"
        raise AssertionError(message) from timeout
    ended_at = time.time()
    report = json.loads(stdout.splitlines()[-1]) if stdout.strip() else {}
    assert report, f"the script failed before generating (exit code {process.returncode}):\n{stderr}"
    exit_s = ended_at - report["generated_at"]
    return Exit(process.returncode, stderr, report["worker_pids"], report["shm"], exit_s)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":  # the workers are spawned and re-import this module
    main(*sys.argv[1:])
