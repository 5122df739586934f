"""Messages sent on a pipe from a thread of their own, so that whoever posts them never waits for the process
at the other end to read: the engine's steps never wait for the server, and the server's event loop never
waits for a step to end before its next request reaches the engine (a pipe holds only a few prompts). What
queued while one send ran goes as one list, in order."""

from __future__ import annotations

import queue
import threading
from multiprocessing.connection import Connection

_CLOSE = object()


class PipeSender:
    def __init__(self, conn: Connection, name: str):
        self.conn = conn
        self._messages: queue.SimpleQueue = queue.SimpleQueue()
        self.failed: BaseException | None = None  # why a send failed: the other end is gone
        self._thread = threading.Thread(target=self._send_all, name=name, daemon=True)
        self._thread.start()

    def post(self, message: object) -> None:
        """Queue `message`; an OSError once a send has failed (nothing reads the other end)."""
        if self.failed is not None:
            raise OSError(f"the process at the other end of the pipe is gone: {self.failed}")
        self._messages.put(message)

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is posted, then stop the thread; waits at most `timeout_s` for a reader that does not
        read (the thread then ends once the pipe breaks)."""
        self._messages.put(_CLOSE)
        self._thread.join(timeout_s)

    def _send_all(self) -> None:
        closing = False
        while not closing:
            pending = [self._messages.get()]
            while not self._messages.empty():
                pending.append(self._messages.get_nowait())
            closing = _CLOSE in pending
            messages = [message for message in pending if message is not _CLOSE]
            if not messages or self.failed is not None:
                continue
            try:
                self.conn.send(messages)
            except (OSError, ValueError) as error:  # the pipe is closed or broken
                self.failed = error
