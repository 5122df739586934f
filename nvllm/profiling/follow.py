"""Following a run dir while its run goes (`nvllm visualize RUN_DIR --follow`): its files as far as they are
written, drawn again whenever rows were added, until the run writes its end marker.

A live run appends to `steps.csv` as it steps and writes `requests.csv` and `profile.json` when it ends, so
any of them may be missing, and the last line of a CSV may be half-written, when they are read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from nvllm.profiling.timeline import (
    END_MARKER,
    PROFILE_FILE,
    REQUEST_FIELDS,
    REQUESTS_FILE,
    STEP_FIELDS,
    STEPS_FILE,
    read_rows,
)

DEFAULT_INTERVAL_S = 2.0


def read_growing_run_dir(run_dir: Path) -> tuple[list[dict], list[dict] | None, dict | None] | None:
    """The steps written so far, the requests and the profile numbers where their files are there yet
    (None where not), or None while the run dir holds no steps file."""
    run_dir = Path(run_dir)
    if not (run_dir / STEPS_FILE).is_file():
        return None
    steps = read_rows(run_dir / STEPS_FILE, STEP_FIELDS, growing=True)
    requests_path, profile_path = run_dir / REQUESTS_FILE, run_dir / PROFILE_FILE
    requests = read_rows(requests_path, REQUEST_FIELDS, growing=True) if requests_path.is_file() else None
    try:
        profile = json.loads(profile_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or being written
        profile = None
    return steps, requests, profile


def follow(
    run_dir: Path,
    draw: Callable[[list[dict], list[dict] | None, dict | None], None],
    interval_s: float = DEFAULT_INTERVAL_S,
) -> int:
    """Call `draw(steps, requests, profile)` whenever `run_dir`'s files hold rows that the last call did not
    see, checking every `interval_s` seconds, and once more when the end marker has appeared; returns the
    number of calls."""
    run_dir = Path(run_dir)
    num_draws, drawn = 0, None
    while True:
        ended = (run_dir / END_MARKER).exists()  # before reading: the last read sees all the run wrote
        files = read_growing_run_dir(run_dir)
        if files is not None:
            steps, requests, profile = files
            seen = (len(steps), None if requests is None else len(requests), profile is not None)
            if ended or (seen != drawn and steps):
                draw(steps, requests, profile)
                num_draws, drawn = num_draws + 1, seen
        if ended:
            return num_draws
        time.sleep(interval_s)
