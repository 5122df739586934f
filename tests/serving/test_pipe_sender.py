"""The pipe sender between the server's and the engine's processes: whoever posts never waits for the other
end to read, and what queued meanwhile goes as one list, in order; what crosses it arrives whole."""

import dataclasses
import pickle
import threading

import pytest

from nvllm.outputs import CompletionOutput
from nvllm.serving.pipe_sender import PipeSender
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
    sender = PipeSender(pipe, "test-sender")
    sender.post(([("delta", "a", 1)], EngineStats(running=1)))
    assert pipe.sending.wait(10)  # the first message is on its way, and held up
    sender.post(([("delta", "a", 2)], EngineStats(running=2)))  # posting does not wait for it
    sender.post(("add", "b"))
    sender.post(("stop",))
    pipe.release.set()
    sender.close()
    assert pipe.sent == [
        [([("delta", "a", 1)], EngineStats(running=1))],
        [([("delta", "a", 2)], EngineStats(running=2)), ("add", "b"), ("stop",)],
    ]


def test_closing_waits_no_longer_than_asked_for_a_pipe_nobody_reads():
    pipe = SlowPipe()
    sender = PipeSender(pipe, "test-sender")
    sender.post(("add", "a"))
    assert pipe.sending.wait(10)
    sender.close(timeout_s=0.05)  # returns although the send still waits
    assert pipe.sent == []
    pipe.release.set()


def test_a_pipe_that_broke_fails_the_next_post():
    class BrokenPipe:
        def send(self, message):
            raise BrokenPipeError("the server's process is gone")

    sender = PipeSender(BrokenPipe(), "test-sender")
    sender.post(([], EngineStats()))
    sender.close()  # the failed send ends nothing but the thread
    with pytest.raises(OSError, match="server's process is gone"):
        sender.post(([], EngineStats()))


def test_a_delta_crosses_the_pipe_whole():
    delta = CompletionOutput(
        index=2,
        text=" wörd",
        token_ids=[7, 8],
        finish_reason="stop",
        stop_reason="</s>",
        logprobs=[{7: -0.5, 3: -1.0}, {8: -0.25}],
        cumulative_logprob=-0.75,
    )
    defaults = CompletionOutput(index=0, text="", token_ids=[])
    assert all(getattr(delta, f.name) != getattr(defaults, f.name) for f in dataclasses.fields(delta))
    assert pickle.loads(pickle.dumps(delta)) == delta
