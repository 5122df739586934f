"""Ctrl-C during an experiment: one line, not a traceback; the repeats finished before it are recorded."""

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from tests.helpers.experiment_utils import TINY

LONG_WORKLOAD = ["workload.num_seqs=2", "workload.input_len=16", "workload.output_len=1500"]
# repeats of a fixed length, each long enough for the interrupt to land in the second: the first must finish
# before the interrupt is sent, so its length is what the test waits for
FIXED_LENGTH_REPEATS = [
    "workload.num_seqs=2",
    "workload.input_len=16",
    "workload.output_len=400",
    "workload.min_output_len=400",
    "workload.repeats=3",
]


def interrupt_when(log: Path, text: str, process: subprocess.Popen, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)


def run_and_interrupt(tmp_path: Path, overrides: list[str], when: str) -> tuple[int, str, Path]:
    run_dir, log = tmp_path / "run", tmp_path / "output.log"
    command = [
        sys.executable,
        "-m",
        "nvllm",
        "run",
        *TINY,
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # stderr on a terminal, as a user's: the progress panel shows only there, and says when generation runs
    terminal, terminal_device = pty.openpty()
    rows_columns = struct.pack("HHHH", 24, 200, 0, 0)  # a new terminal has 0 columns: no room for a bar
    fcntl.ioctl(terminal_device, termios.TIOCSWINSZ, rows_columns)
    with open(log, "a") as output:
        process = subprocess.Popen(
            command, env=env, stdout=output, stderr=terminal_device, preexec_fn=default_ctrl_c
        )
        os.close(terminal_device)
        copier = threading.Thread(target=copy_until_closed, args=(terminal, log))
        copier.start()
        interrupt_when(log, when, process)
        returncode = process.wait(timeout=120)
        copier.join(timeout=60)
    return returncode, log.read_text(errors="replace"), run_dir


def default_ctrl_c() -> None:
    """In the child: SIGINT raises KeyboardInterrupt even where pytest runs as a shell's background job,
    which starts with SIGINT ignored and hands that on to its children (Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def copy_until_closed(terminal: int, log: Path) -> None:
    """What the process writes to its terminal, appended to `log` until the process has closed it."""
    with open(log, "ab", buffering=0) as output:
        while True:
            try:
                data = os.read(terminal, 4096)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not data:
                break
            output.write(data)
    os.close(terminal)


def test_ctrl_c_in_the_first_repeat_ends_with_one_line(tmp_path):
    returncode, output, run_dir = run_and_interrupt(
        tmp_path, ["+experiment=bench", *LONG_WORKLOAD], when="Generating:"
    )
    assert returncode == 130 and "Traceback" not in output
    assert output.rstrip().splitlines()[-1] == (
        f"Interrupted (Ctrl-C) before a repeat finished: no results in {run_dir}"
    )


def test_ctrl_c_after_a_repeat_records_the_repeats_finished(tmp_path):
    overrides = ["+experiment=bench", *FIXED_LENGTH_REPEATS]
    returncode, output, run_dir = run_and_interrupt(tmp_path, overrides, when="Repeat 1/3:")
    assert returncode == 0 and "Traceback" not in output
    assert "Interrupted (Ctrl-C) in repeat 2/3: recording the 1 finished" in output
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metrics"]["repeats"] == 1 and len(results["repeats"]) == 1
