"""The step and request timelines (what a profiled engine records of each) and the files a profiled run
writes into its run dir: `steps.csv`, `requests.csv`, `profile.json` (`Profiler.as_dict()`) and
`profile.txt` (its summary).

Times are seconds since the profiler started (or was reset). A request's lists hold one entry per event:
`preempted_s` and `resumed_s` (re-admissions after a preemption), `prefill_done_s` (each admission's
prompt computed, its first token sampled)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

STEP_FIELDS: dict[str, type] = {
    "step": int,
    "start_s": float,
    "end_s": float,
    "kind": str,  # prefill | decode
    "num_seqs": int,
    "num_tokens": int,  # prefill: the prompt tokens computed; decode: the sampled tokens kept
    "num_decode_steps": int,  # model steps of the decode round (0 for prefill)
    "kv_blocks_used": int,  # after the step
    "kv_blocks_free": int,
    "num_running": int,
    "num_waiting": int,
    "num_preemptions": int,  # during the step
    "num_prefix_hit_tokens": int,  # prompt tokens found in the prefix cache at admissions during the step
    "device_ms": float,  # the batch's device time (CUDA events; host time of the launch on a CPU)
}
REQUEST_FIELDS: dict[str, type] = {
    "request": int,
    "prompt_len": int,
    "output_len": int,
    "cached_tokens": int,  # prefix-cache hits over all its admissions
    "arrival_s": float,
    "first_scheduled_s": float,
    "first_token_s": float,
    "finish_s": float,
    "num_preemptions": int,
    "preempted_s": list,
    "resumed_s": list,
    "prefill_done_s": list,
}
STEPS_FILE, REQUESTS_FILE = "steps.csv", "requests.csv"
PROFILE_FILE, SUMMARY_FILE = "profile.json", "profile.txt"
RUN_FILES = (STEPS_FILE, REQUESTS_FILE, PROFILE_FILE)
# written into the run dir when a run has ended (finished or failed): whoever follows its growing files stops
END_MARKER = "run.finished"


def new_request(request_id: int, prompt_len: int, arrival_s: float) -> dict:
    record = dict.fromkeys(REQUEST_FIELDS)
    record.update(request=request_id, prompt_len=prompt_len, output_len=0, cached_tokens=0)
    record.update(arrival_s=arrival_s, num_preemptions=0, preempted_s=[], resumed_s=[], prefill_done_s=[])
    return record


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(repr(item) for item in value)
    return repr(value) if isinstance(value, float) else str(value)


def _parse(text: str, kind: type):
    if kind is list:
        return [float(item) for item in text.split()]
    if text == "":
        return None
    return kind(text)


def row_cells(row: dict, fields: dict[str, type]) -> list[str]:
    """`row`'s values as the CSV cells of `fields`, in their order."""
    return [_cell(row[name]) for name in fields]


def write_rows(path: Path, rows: list[dict], fields: dict[str, type]) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(fields)
        writer.writerows(row_cells(row, fields) for row in rows)


def read_rows(path: Path, fields: dict[str, type], growing: bool = False) -> list[dict]:
    """The rows of a CSV file; `growing`: one still appended to, whose last line may be half-written (read up
    to its last line break)."""
    with open(path, newline="") as file:
        text = file.read()
    if growing:
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    return [{name: _parse(row[name], kind) for name, kind in fields.items()} for row in rows]


def write_run_dir(run_dir: Path, profiler) -> list[Path]:
    """The profiler's timelines, numbers and summary into `run_dir`; returns the files written."""
    run_dir = Path(run_dir)
    write_rows(run_dir / STEPS_FILE, profiler.steps(), STEP_FIELDS)
    write_rows(run_dir / REQUESTS_FILE, profiler.requests(), REQUEST_FIELDS)
    (run_dir / PROFILE_FILE).write_text(json.dumps(profiler.as_dict(), indent=2) + "\n")
    (run_dir / SUMMARY_FILE).write_text(profiler.summary() + "\n")
    return [run_dir / name for name in (*RUN_FILES, SUMMARY_FILE)]


def read_run_dir(run_dir: Path) -> tuple[list[dict], list[dict], dict]:
    """The steps, the requests and the profile numbers that `write_run_dir` wrote."""
    run_dir = Path(run_dir)
    steps = read_rows(run_dir / STEPS_FILE, STEP_FIELDS)
    requests = read_rows(run_dir / REQUESTS_FILE, REQUEST_FIELDS)
    return steps, requests, json.loads((run_dir / PROFILE_FILE).read_text())


def write_profile(run_dir: Path, profiler, trace_file: str = "trace.json") -> list[Path]:
    """With profiling on: `write_run_dir`'s files and the torch trace, if one was taken, as `trace_file` in
    `run_dir` (made if missing); the files written. Nothing with profiling off."""
    if not profiler.enabled:
        return []
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    profiler.stop_stream()
    written = write_run_dir(run_dir, profiler)
    if profiler.no_trace_reason() is None:
        trace = profiler.export_trace(run_dir / trace_file)
        written += [trace] if trace else []
    return written
