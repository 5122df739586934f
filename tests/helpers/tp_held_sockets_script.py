"""A tensor-parallel engine one of whose workers leaves a process behind that holds its sockets and pipes
(as a helper it forked would), killed in the middle of a `generate` call:
`python -m tests.helpers.tp_held_sockets_script`. The killed rank's peers then never see its connections
close. Prints one JSON line: the error rank 0 raised, the seconds from the kill to it, and whether the held
process outlived the engine."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

HELD_PID_FILE = "NVLLM_TEST_HELD_PID_FILE"


def _fork_a_holder_once_in_the_group() -> None:
    """In a worker: once it has joined the group, fork a child that sleeps, holding every descriptor."""
    import torch.distributed as dist

    while not dist.is_initialized():
        time.sleep(0.02)
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    with open(os.environ[HELD_PID_FILE], "w") as file:
        file.write(str(pid))


def alive(pid: int) -> bool:
    """Running (a killed process whose parent died may stay a zombie until init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def main() -> None:
    from nvllm import LLM, SamplingParams

    llm = LLM(
        "tiny", tensor_parallel_size=2, enforce_eager=True, model__vocab_size=4096, num_kvcache_blocks=64
    )
    held_pid_file = os.environ[HELD_PID_FILE]
    while not os.path.exists(held_pid_file) or not open(held_pid_file).read():
        time.sleep(0.02)
    held_pid = int(open(held_pid_file).read())
    worker_pid = llm.model_runner.worker_pids[0]
    killed_at: list[float] = []

    def kill_the_worker_mid_run() -> None:
        while llm.num_decode_tokens < 20:
            time.sleep(0.005)
        killed_at.append(time.perf_counter())
        os.kill(worker_pid, signal.SIGKILL)

    threading.Thread(target=kill_the_worker_mid_run, daemon=True).start()
    prompts = [[100 + i, 200 + i, 300 + i, 400 + i] for i in range(4)]
    error = ""
    try:
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=2000, ignore_eos=True), use_tqdm=False)
    except RuntimeError as raised:
        error = str(raised)
    seconds = time.perf_counter() - killed_at[0] if killed_at else None
    llm.shutdown()
    time.sleep(0.5)
    holder_outlived = alive(held_pid)
    if holder_outlived:
        os.kill(held_pid, signal.SIGKILL)
    print(json.dumps({"error": error, "seconds": seconds, "holder_outlived": holder_outlived}), flush=True)


if __name__ == "__mp_main__":  # in the spawned workers, which import this module under that name
    threading.Thread(target=_fork_a_holder_once_in_the_group, daemon=True).start()

if __name__ == "__main__":
    main()
