"""The default progress bar of `generate`: output for the user's eyes, which must never fail the call it
reports on (stderr closed, a full disk, a broken pipe)."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


class _StderrThatNeverFails:
    """`sys.stderr` as it is at each write (tests and tools swap it), with failed writes dropped."""

    def write(self, text: str) -> int:
        try:
            return sys.stderr.write(text)
        except (OSError, ValueError):  # ValueError: I/O operation on a closed file
            return 0

    def flush(self) -> None:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str):
        return getattr(sys.stderr, name)


def progress_bar(total: int, description: str, enabled: bool) -> tqdm:
    """A tqdm bar over `total` items on stderr; a disabled one where stderr cannot even be set up."""
    try:
        stderr = _StderrThatNeverFails()
        return tqdm(total=total, desc=description, dynamic_ncols=True, disable=not enabled, file=stderr)
    except (OSError, ValueError):
        return tqdm(total=total, disable=True)
