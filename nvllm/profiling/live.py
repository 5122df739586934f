"""Step records streamed while a run goes (`profile.live`): each step's record is appended to the run dir's
`steps.csv` as it comes, flushed, so a crash leaves the timeline up to it; a few times a second the latest
record, with the tok/s over the last second, goes to a sink (the harness's logs it to wandb).

The engine's thread only puts the record on a queue; a daemon thread writes the file and calls the sink,
so a step never waits on I/O."""

from __future__ import annotations

import csv
import queue
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path

from nvllm.profiling.timeline import STEP_FIELDS, STEPS_FILE, row_cells

POINTS_PER_S = 4.0  # sink calls a second at most: a live chart, not a load on the tracker
RATE_WINDOW_S = 1.0  # tok/s counts the tokens of the steps that ended in the last second
_RESTART, _STOP = object(), object()

# a step's record, its `wall_time` (time.time() when the step was recorded) and `tok_per_s`
Sink = Callable[[dict], None]


class TokenRate:
    """Tokens a second over the steps that ended in the last `window_s` of the profiler's clock (over
    less while the timeline is younger than that)."""

    def __init__(self, window_s: float = RATE_WINDOW_S):
        self.window_s = window_s
        self._recent: deque[dict] = deque()
        self._recent_tokens = 0  # the tokens of `_recent`, kept as it changes: not summed again each step
        self._first_start_s: float | None = None

    def add(self, record: dict) -> float:
        """`record` counted; the rate at its end."""
        if self._first_start_s is None:
            self._first_start_s = record["start_s"]
        self._recent.append(record)
        self._recent_tokens += record["num_tokens"]
        while self._recent[0]["end_s"] <= record["end_s"] - self.window_s:
            self._recent_tokens -= self._recent.popleft()["num_tokens"]
        span_s = min(self.window_s, record["end_s"] - self._first_start_s)
        return self._recent_tokens / span_s if span_s > 0 else 0.0


class LiveSteps:
    """Streams step records into `run_dir/steps.csv` and, at most `points_per_s` times a second, to
    `sink`. `close()` writes what is queued and stops the thread."""

    def __init__(self, run_dir: Path, sink: Sink | None = None, points_per_s: float = POINTS_PER_S):
        self.path = Path(run_dir) / STEPS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._sink, self._min_gap_s = sink, 1.0 / points_per_s
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._drain, name="nvllm-live-steps", daemon=True)
        self._thread.start()

    # ---- the engine's thread: queue puts only -------------------------------------------------------
    def put(self, record: dict) -> None:
        """`record` (a step of STEP_FIELDS, not changed afterwards), stamped with the wall time now."""
        self._queue.put((time.time(), record))

    def restart(self) -> None:
        """The profiler was reset: the file and the rate start again, as its timeline does."""
        self._queue.put(_RESTART)

    def close(self) -> None:
        """Everything queued written, the thread stopped; the file holds every record then."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()

    # ---- the stream's thread ------------------------------------------------------------------------
    def _drain(self) -> None:
        last_point_s = -float("inf")
        item = _RESTART
        while item is not _STOP:
            if item is _RESTART:
                with open(self.path, "w", newline="") as file:  # the header alone; rows are appended
                    csv.writer(file).writerow(STEP_FIELDS)
                rate = TokenRate()
            else:
                wall_time, record = item
                with open(self.path, "a", newline="") as file:  # closed: whole rows on disk at each step
                    csv.writer(file).writerow(row_cells(record, STEP_FIELDS))
                tok_per_s = rate.add(record)
                if self._sink is not None and time.monotonic() - last_point_s >= self._min_gap_s:
                    last_point_s = time.monotonic()
                    self._send({**record, "wall_time": wall_time, "tok_per_s": tok_per_s})
            item = self._queue.get()

    def _send(self, point: dict) -> None:
        try:
            self._sink(point)
        except Exception as error:  # the file goes on; a tracker that fails is dropped, said once
            warnings.warn(f"live step records: the sink failed ({error!r}); it gets no more", stacklevel=1)
            self._sink = None
