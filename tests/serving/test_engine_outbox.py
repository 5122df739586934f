"""The engine process's outbox: a step never waits for the server to read, and what queued meanwhile goes
as one message."""

import threading

import pytest

from nvllm.serving.engine_child import Outbox
from nvllm.serving.served_engine import EngineStats


class SlowPipe:
    """A connection whose first send blocks until `release` is set."""

    def __init__(self):
        self.sent, self.release, self.sending = [], threading.Event(), threading.Event()

    def send(self, message):
        self.sending.set()
        self.release.wait(10)
        self.sent.append(message)


def test_messages_posted_during_a_send_go_together_in_order():
    pipe = SlowPipe()
    outbox = Outbox(pipe)
    outbox.post([("delta", "a", 1)], EngineStats(running=1))
    assert pipe.sending.wait(10)  # the first message is on its way, and held up
    outbox.post([("delta", "a", 2)], EngineStats(running=2))  # posting does not wait for it
    outbox.post([("delta", "b", 3), ("end", "a", None)], EngineStats(running=3))
    pipe.release.set()
    outbox.close()
    assert pipe.sent == [
        ("batch", [("delta", "a", 1)], EngineStats(running=1)),
        ("batch", [("delta", "a", 2), ("delta", "b", 3), ("end", "a", None)], EngineStats(running=3)),
    ]


def test_a_pipe_that_broke_fails_the_next_post():
    class BrokenPipe:
        def send(self, message):
            raise BrokenPipeError("the server's process is gone")

    outbox = Outbox(BrokenPipe())
    outbox.post([], EngineStats())
    outbox.close()  # the failed send ends nothing but the thread
    with pytest.raises(OSError, match="server's process is gone"):
        outbox.post([], EngineStats())
