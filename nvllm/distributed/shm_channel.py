"""One writer (rank 0) broadcasting pickled messages to N readers (the worker ranks) through one shared-memory
buffer, with a `ready` and a `read` semaphore per reader; plus a slot per reader for the traceback of its
failure.

The writer's waits poll a liveness check of the readers, so a reader that dies turns into an error instead
of a hang; a reader ends with the writer's process (see `tensor_parallel`), so it simply waits.
Semaphores, not `multiprocessing.Event`s: an Event's `set()` waits for every process asleep in `wait()` to
acknowledge, so a worker killed while waiting for a message made rank 0's next `set()` hang forever; a
semaphore's `release()` never waits.
"""

from __future__ import annotations

import os
import pickle
import struct
import uuid
from collections.abc import Callable
from multiprocessing.shared_memory import SharedMemory
from typing import Any

HEADER = struct.Struct("<Q")  # the byte length of what follows
ERROR_SLOT_BYTES = 64 * 1024
POLL_S = 0.05


def _acquire(semaphore: Any, check: Callable[[], None]) -> None:
    """Take `semaphore`, calling `check` (which raises when the other side is gone) between short waits."""
    while not semaphore.acquire(timeout=POLL_S):
        check()


class ShmBroadcast:
    """The writer's end; it owns the shared memory (and unlinks it on `close`)."""

    def __init__(self, capacity: int, num_readers: int, context: Any):
        self.capacity = capacity
        # unique per engine: two engines (in one process or two) never share a buffer
        name = f"nvllm_tp_{os.getpid()}_{uuid.uuid4().hex[:12]}"
        size = HEADER.size + capacity + num_readers * ERROR_SLOT_BYTES
        self.shm = SharedMemory(name, create=True, size=size)
        self.ready = [context.Semaphore(0) for _ in range(num_readers)]  # a message is waiting
        self.read = [context.Semaphore(1) for _ in range(num_readers)]  # the buffer is free (it starts so)

    @property
    def name(self) -> str:
        return self.shm.name

    def reader(self, index: int) -> ShmReader:
        errors_offset = HEADER.size + self.capacity
        return ShmReader(self.shm.name, index, errors_offset, self.ready[index], self.read[index])

    def send(self, message: Any, check: Callable[[], None]) -> None:
        """Write `message` once every reader has read the previous one, then wake them all."""
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) > self.capacity:
            raise RuntimeError(
                f"a {len(payload)}-byte message does not fit the {self.capacity}-byte shared-memory buffer "
                "sized from the scheduler config"
            )
        for semaphore in self.read:
            _acquire(semaphore, check)
        HEADER.pack_into(self.shm.buf, 0, len(payload))
        self.shm.buf[HEADER.size : HEADER.size + len(payload)] = payload
        for semaphore in self.ready:
            semaphore.release()

    def error(self, index: int) -> str:
        """What reader `index` wrote about its failure ('' if nothing)."""
        start = HEADER.size + self.capacity + index * ERROR_SLOT_BYTES
        (length,) = HEADER.unpack_from(self.shm.buf, start)
        text = bytes(self.shm.buf[start + HEADER.size : start + HEADER.size + length])
        return text.decode(errors="replace")

    def close(self) -> None:
        self.shm.close()
        self.shm.unlink()
        self.ready, self.read = [], []  # their named semaphores are unlinked once nothing holds them


class ShmReader:
    """A reader's end: picklable, so it travels to a spawned worker, which attaches with `open()`."""

    def __init__(self, name: str, index: int, errors_offset: int, ready: Any, read: Any):
        self.name, self.index, self.errors_offset = name, index, errors_offset
        self.ready, self.read = ready, read
        self.shm: SharedMemory | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "shm": None}

    def open(self) -> None:
        # Python < 3.13 also registers an attached segment with the resource tracker, which spawned processes
        # share with rank 0; the registration is the writer's too, so it is left alone (unregistering it would
        # drop the writer's, and the tracker could no longer unlink the segment after a crash).
        self.shm = SharedMemory(self.name)

    def receive(self) -> Any:
        self.ready.acquire()
        (length,) = HEADER.unpack_from(self.shm.buf, 0)
        message = pickle.loads(self.shm.buf[HEADER.size : HEADER.size + length])
        self.read.release()
        return message

    def report_error(self, text: str) -> None:
        """Leave `text` (its end, where a traceback says what failed) for the writer to read."""
        data = text.encode()[-(ERROR_SLOT_BYTES - HEADER.size) :]
        start = self.errors_offset + self.index * ERROR_SLOT_BYTES
        HEADER.pack_into(self.shm.buf, start, len(data))
        self.shm.buf[start + HEADER.size : start + HEADER.size + len(data)] = data

    def close(self) -> None:
        if self.shm is not None:
            self.shm.close()
            self.shm = None
