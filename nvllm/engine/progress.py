"""The default progress bar of `generate`: output for the user's eyes, which must never fail the call it
reports on (stderr closed, a full disk, a broken pipe)."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm

# What writing to stderr raises when there is none (None under pythonw), it is closed (ValueError), or the
# disk or pipe behind it is full or gone (OSError)
NO_STDERR = (AttributeError, OSError, ValueError)


class _StderrThatNeverFails:
    """`sys.stderr` as it is at each write (tests and tools swap it), with failed writes dropped."""

    def write(self, text: str) -> int:
        try:
            return sys.stderr.write(text)
        except NO_STDERR:
            return 0

    def flush(self) -> None:
        try:
            sys.stderr.flush()
        except NO_STDERR:
            pass

    def __getattr__(self, name: str):
        return getattr(sys.stderr, name)


def stderr_is_terminal() -> bool:
    """Whether a person watches stderr: the command line shows its panels only then (a log file or a
    cluster job's output gets none of their redraws)."""
    try:
        return sys.stderr.isatty()
    except NO_STDERR:
        return False


def progress_bar(total: int, description: str, enabled: bool, unit: str = "it") -> tqdm:
    """A tqdm bar over `total` items (`unit`s) on stderr."""
    stderr = _StderrThatNeverFails()
    return tqdm(
        total=total, desc=description, unit=unit, dynamic_ncols=True, disable=not enabled, file=stderr
    )
