"""What the experiment tests share: a tiny engine and workload, and reading offline wandb runs back."""

import json
import time
from pathlib import Path

TINY = ["model=tiny", "compile=eager", "cache.block_size=16", "cache.num_blocks=256", "wandb.mode=offline"]
SMALL_WORKLOAD = [
    "workload.num_seqs=3",
    "workload.input_len=24",
    "workload.min_input_len=8",
    "workload.output_len=6",
    "workload.min_output_len=2",
]
PNG_MAGIC = b"\x89PNG"


def wandb_run_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("wandb/offline-run-*/run-*.wandb"))


def run_file_holding(directory: Path, *expected: bytes, timeout_s: float = 30.0) -> bytes:
    """The one offline wandb run under `directory`, read once it holds every `expected` byte string (or
    after `timeout_s`): wandb's service process may still be writing it a moment after `run.finish()`
    returns (seen on the 2-core CI machine: only the file's header was there)."""
    deadline = time.monotonic() + timeout_s
    while True:
        [run_file] = wandb_run_files(directory)
        data = run_file.read_bytes()
        if all(item in data for item in expected) or time.monotonic() > deadline:
            return data
        time.sleep(0.2)


def logged(key: str, value) -> tuple[bytes, bytes]:
    """What an offline run holds for `key` logged as `value`: the key and the value's JSON text."""
    return key.encode(), json.dumps(value).encode()
