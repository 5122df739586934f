"""One engine, one owner at a time. Every public call that changes the engine (generate, stream, add_request,
step, abort_all, shutdown) holds the engine's lock for its whole run, so that calls from several threads run
one after another; a stream holds it from its first item to its end, whichever thread iterates it. A call
that would wait for itself (made on the thread that iterates an open stream, from inside that stream's
loop) is refused instead, as is any call after `shutdown`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

STREAM_OPEN = "a stream of this engine is still being iterated: finish or close it first"
SHUT_DOWN = "the engine is shut down: create a new one"


class EngineOwnership:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The thread inside a call; for a stream, the thread that last resumed it (a stream handed to
        # another thread belongs to that thread from its first item there).
        self._owner: int | None = None
        self._stream_suspended = False  # a stream's loop body (the caller's code) is running
        self.is_shut_down = False

    @contextmanager
    def call(self) -> Iterator[None]:
        """Hold the engine for one call, after any call of another thread; refuse one that would wait for
        itself."""
        if self._owner == threading.get_ident():
            raise RuntimeError(STREAM_OPEN if self._stream_suspended else "a call of this engine is running")
        with self._lock:
            self.check_open()
            self._owner = threading.get_ident()
            try:
                yield
            finally:
                self._owner, self._stream_suspended = None, False

    @contextmanager
    def stream_suspended(self) -> Iterator[None]:
        """Around a stream's `yield`: the caller's loop runs, perhaps on another thread from then on."""
        self._stream_suspended = True
        try:
            yield
        finally:
            self._stream_suspended = False
            self._owner = threading.get_ident()
            self.check_open()

    def owns_suspended_stream(self) -> bool:
        """Whether the calling thread iterates a stream that is between two items (no engine work runs)."""
        return self._stream_suspended and self._owner == threading.get_ident()

    def check_open(self) -> None:
        if self.is_shut_down:
            raise RuntimeError(SHUT_DOWN)
