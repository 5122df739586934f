"""What a tensor-parallel worker leaves behind when it dies. Each worker leads a process group of its own,
which the processes it starts join (a forked helper, inductor's compile workers). A process forked by a
worker holds copies of its sockets and pipes: after the worker is killed, its peers' collectives never see
its connections close and wait for the collective timeout (minutes), and its exit is invisible to a wait on
its sentinel. Rank 0 therefore watches its workers' exits itself and ends each dead worker's group."""

from __future__ import annotations

import os
import signal
import threading

WATCH_INTERVAL_S = 0.05


def lead_own_group() -> None:
    """In a worker, first thing: a process group of its own, for what it starts to join."""
    os.setpgid(0, 0)


def has_exited(pid: int) -> bool:
    """Whether the child `pid` has exited, without reaping it (multiprocessing reads its exit code later)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # already reaped


def end_group(pid: int) -> None:
    """Kill whatever is left of the process group that the worker `pid` led."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left of it


class WorkerWatch:
    """A thread on rank 0 that ends the group of each worker as soon as the worker has exited, so that the
    ranks' collectives fail at once and the exit can be reported."""

    def __init__(self, pids: list[int]):
        self._pending = list(pids)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="nvllm-worker-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while self._pending and not self._stopped.wait(WATCH_INTERVAL_S):
            for pid in [pid for pid in self._pending if has_exited(pid)]:
                end_group(pid)
                self._pending.remove(pid)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
