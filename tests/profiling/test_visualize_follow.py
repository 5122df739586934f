"""`nvllm visualize RUN_DIR --follow`: a run dir written as a live run writes it (steps.csv growing line by
line, a half-written last line, then requests.csv, profile.json and the end marker) is waited for while
empty, drawn again only when rows were added, with the rows written so far, and left when the marker
appears, after one last draw of everything."""

import json
import subprocess
import sys
import threading
import time

import pytest

from nvllm.profiling.follow import follow
from nvllm.profiling.timeline import END_MARKER, PROFILE_FILE, REQUESTS_FILE, STEPS_FILE
from nvllm.visualize import FIGURE_NAMES
from tests.helpers.profiled_run import write_profiled_run

INTERVAL_S = 0.02


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A profiled run's files, and what its profiler recorded: the oracle of what a follower reads."""
    directory = tmp_path_factory.mktemp("finished-run")
    steps, requests, profile = write_profiled_run(directory)
    return directory, (steps, requests, json.loads(json.dumps(profile)))  # as read back: lists for tuples


def grow_steps(run_dir, finished_dir, num_rows: int, extra_chars: int = 0) -> None:
    """Append to `run_dir`'s steps file, as a live run does, up to the header and the first `num_rows` rows
    of the finished run's, and `extra_chars` of the next line."""
    lines = (finished_dir / STEPS_FILE).read_text().splitlines(keepends=True)
    target = "".join(lines[: num_rows + 1]) + "".join(lines[num_rows + 1 : num_rows + 2])[:extra_chars]
    path = run_dir / STEPS_FILE
    written = path.read_text() if path.exists() else ""
    assert target.startswith(written)
    with open(path, "a") as file:
        file.write(target[len(written) :])


def finish(run_dir, finished_dir) -> None:
    """The rest of the run's files, then its end marker, as a live run ends."""
    grow_steps(run_dir, finished_dir, len((finished_dir / STEPS_FILE).read_text().splitlines()) - 1)
    for name in (REQUESTS_FILE, PROFILE_FILE):
        (run_dir / name).write_text((finished_dir / name).read_text())
    (run_dir / END_MARKER).touch()


def wait_until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_follow_draws_the_rows_written_so_far_until_the_end_marker(tmp_path, finished_run):
    finished_dir, (steps, requests, profile) = finished_run
    assert len(steps) > 5
    draws, result = [], []
    follower = threading.Thread(
        daemon=True,
        target=lambda: result.append(follow(tmp_path, lambda *data: draws.append(data), INTERVAL_S)),
    )
    follower.start()
    time.sleep(10 * INTERVAL_S)
    assert draws == []  # no files yet: it waits
    grow_steps(tmp_path, finished_dir, 3, extra_chars=7)
    wait_until(lambda: len(draws) == 1)
    assert draws[0] == (steps[:3], None, None)  # the half-written line is not read
    grow_steps(tmp_path, finished_dir, 3, extra_chars=15)
    time.sleep(10 * INTERVAL_S)
    assert len(draws) == 1  # no row added: no redraw
    grow_steps(tmp_path, finished_dir, 5)
    wait_until(lambda: len(draws) == 2)
    assert draws[1] == (steps[:5], None, None)
    finish(tmp_path, finished_dir)
    follower.join(timeout=60)
    assert not follower.is_alive()
    assert draws[-1] == (steps, requests, profile)
    assert result == [len(draws)]


def test_the_command_redraws_the_figures_and_exits_at_the_end_marker(tmp_path, finished_run):
    finished_dir, (steps, _, _) = finished_run
    command = [sys.executable, "-m", "nvllm.visualize", str(tmp_path), "--follow", "--interval", "0.05"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().startswith(f"following {tmp_path}")
        batches = tmp_path / "figures" / FIGURE_NAMES[0]
        grow_steps(tmp_path, finished_dir, 2, extra_chars=3)
        assert process.stdout.readline() == "2 steps: drew batch_size.png, kv_cache.png\n"
        first_draw = batches.stat().st_mtime_ns
        grow_steps(tmp_path, finished_dir, 4)
        assert process.stdout.readline() == "4 steps: drew batch_size.png, kv_cache.png\n"
        assert batches.stat().st_mtime_ns != first_draw
        finish(tmp_path, finished_dir)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert stdout == f"{len(steps)} steps: drew {', '.join(FIGURE_NAMES)}\n"
    assert all((tmp_path / "figures" / name).is_file() for name in FIGURE_NAMES)
