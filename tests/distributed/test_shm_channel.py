"""ShmBroadcast: one writer's messages reach every reader in spawned processes, a message too large for the
buffer is refused and the channel still works, a reader's error is readable by the writer, and `close`
leaves nothing in /dev/shm."""

import multiprocessing
import os
import traceback

import pytest

from nvllm.distributed.shm_channel import ERROR_SLOT_BYTES, ShmBroadcast, ShmReader

CAPACITY = 4096
NUM_READERS = 2
STOP, FAIL = "stop", "fail"


def echo(reader: ShmReader, replies) -> None:
    """A reader process: puts each message it receives on `replies` until STOP; on FAIL it leaves an error
    (a traceback, as a worker does) for the writer and ends."""
    reader.open()
    try:
        while (message := reader.receive()) != STOP:
            if message == FAIL:
                try:
                    raise ValueError(f"reader {reader.index} failed")
                except ValueError:
                    reader.report_error(traceback.format_exc())
                return
            replies.put((reader.index, message))
    finally:
        reader.close()


@pytest.fixture
def channel():
    """A channel with NUM_READERS readers in spawned processes, and the queue they reply on."""
    context = multiprocessing.get_context("spawn")
    broadcast = ShmBroadcast(CAPACITY, NUM_READERS, context)
    replies = context.Queue()
    processes = [
        context.Process(target=echo, args=(broadcast.reader(index), replies)) for index in range(NUM_READERS)
    ]
    for process in processes:
        process.start()

    def check() -> None:
        for process in processes:
            if process.exitcode is not None:
                raise RuntimeError(f"reader {process.pid} ended with {process.exitcode}")

    yield broadcast, check, replies, processes
    for process in processes:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
    if broadcast.ready:
        broadcast.close()


def received(replies) -> list:
    return sorted(replies.get(timeout=30) for _ in range(NUM_READERS))


def test_messages_reach_every_reader_and_close_unlinks_the_segment(channel):
    broadcast, check, replies, processes = channel
    message = {"tokens": [[1, 2], [3]], "text": "é" * 100}
    broadcast.send(message, check)
    assert received(replies) == [(0, message), (1, message)]
    broadcast.send([4, 5], check)  # waits for both readers to have read the first
    assert received(replies) == [(0, [4, 5]), (1, [4, 5])]
    broadcast.send(STOP, check)
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert os.path.exists(f"/dev/shm/{broadcast.name}")
    broadcast.close()
    assert not os.path.exists(f"/dev/shm/{broadcast.name}")


def test_a_message_larger_than_the_buffer_is_refused_and_the_channel_still_works(channel):
    broadcast, check, replies, _ = channel
    with pytest.raises(RuntimeError, match=rf"-byte message does not fit the {CAPACITY}-byte shared-memory"):
        broadcast.send(b"x" * CAPACITY, check)
    broadcast.send("after", check)
    assert received(replies) == [(0, "after"), (1, "after")]
    broadcast.send(STOP, check)


def test_a_readers_error_is_readable_by_the_writer(channel):
    broadcast, check, _, processes = channel
    assert broadcast.error(0) == broadcast.error(1) == ""
    broadcast.send(FAIL, check)
    for process in processes:
        process.join(timeout=30)
    assert broadcast.error(0).startswith("Traceback")
    assert broadcast.error(0).endswith("ValueError: reader 0 failed\n")
    assert broadcast.error(1).endswith("ValueError: reader 1 failed\n")
    broadcast.send("unread", check)  # the buffer is free: the readers read FAIL
    with pytest.raises(RuntimeError, match="ended with 0"):  # no reader reads it: an error, not a hang
        broadcast.send("unread", check)


def test_a_long_error_keeps_its_end():
    broadcast = ShmBroadcast(CAPACITY, NUM_READERS, multiprocessing.get_context("spawn"))
    reader = broadcast.reader(1)
    reader.open()
    try:
        reader.report_error("x" * ERROR_SLOT_BYTES + "the cause")
        assert broadcast.error(1) == ("x" * ERROR_SLOT_BYTES + "the cause")[-(ERROR_SLOT_BYTES - 8) :]
        assert broadcast.error(0) == ""
    finally:
        reader.close()
        broadcast.close()
