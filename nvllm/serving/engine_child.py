"""The engine's own process (started by EngineProcess): it builds the engine from the server's config and
runs the loop AsyncEngine's thread runs (take intake, step, hand on each request's deltas), with the server's
process at the other end of a pipe. After each step it posts one message with everything the step made; a
thread of its own sends them (`PipeSender`), so that a server slow to read never holds up a step: what piles
up meanwhile goes as one list, whose deltas of a request the server's stream then writes as one chunk.

Each message on the pipe after the first is a list of messages (`PipeSender`). From the server:
("add", request_id, prompt_token_ids, params, priority, streaming), ("abort", request_id, token), ("stop",).
To the server: ("ready", None) or ("failed", error) once, then (events, stats) after each step with events
("accepted", request_id, error or None), ("delta", request_id, CompletionOutput), ("error", request_id,
error), ("end", request_id, FinishedRequest) and ("aborted", token)."""

from __future__ import annotations

import pickle
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from nvllm.config import EngineConfig
from nvllm.engine.llm_engine import LLMEngine
from nvllm.engine.request_outputs import StreamCursor
from nvllm.llm import LLM
from nvllm.profiling.timeline import write_profile
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.serving.pipe_sender import PipeSender
from nvllm.serving.served_engine import FinishedRequest, engine_stats
from nvllm.serving.serving_rules import admit, drop, serve_step


def run_engine(conn: Connection, config: EngineConfig, profile_dir: str | None = None) -> None:
    """The process's body: serve until told to stop or until the server's process is gone. With
    `profile.enabled` and a `profile_dir`, the engine's profile goes there once it is told to stop: its steps
    as they ran in this process (the loop's own work between them is the "other" stage, its waits for
    requests "idle")."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server stops this
    try:
        engine = LLM.from_config(config)
    except Exception as error:  # noqa: BLE001 - the server reports why it could not start
        conn.send(("failed", picklable(error)))
        conn.close()
        return
    outbox = None
    try:
        conn.send(("ready", None))
        outbox = PipeSender(conn, "nvllm-engine-outbox")
        ServingLoop(engine, conn, outbox).run()
        if profile_dir is not None:
            write_profile(Path(profile_dir), engine.profiler)
    except (EOFError, OSError):
        pass  # the server's process is gone: nobody to serve
    finally:
        if outbox is not None:
            outbox.close()
        engine.shutdown()
        conn.close()


def picklable(error: BaseException) -> BaseException:
    """`error` if it can cross the pipe, else a RuntimeError with its type and message."""
    try:
        pickle.dumps(error)
    except Exception:  # noqa: BLE001 - any failure to pickle
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


@dataclass
class _Request:
    prompt_token_ids: list[int]
    streaming: bool
    samples: list[Sequence]
    cursors: list[StreamCursor]


class ServingLoop:
    def __init__(self, engine: LLMEngine, conn: Connection, outbox: PipeSender):
        self.engine, self.conn, self.outbox = engine, conn, outbox
        self.active: dict[str, _Request] = {}
        self.events: list[tuple] = []
        self.stopping = False

    def run(self) -> None:
        self.engine.profiler.reset()  # the profile is of serving, from here on: not the engine's start-up
        while not self.stopping:
            if self.engine.is_finished():
                self.engine.profiler.lap("other")  # the loop's own work, apart from its waits for work
                self.take_all(self.conn.recv())  # idle: wait for work
                self.engine.profiler.lap("idle")
            while not self.stopping and self.conn.poll():
                self.take_all(self.conn.recv())
            stepped = not self.stopping and not self.engine.is_finished()
            if stepped:
                self.step()
            if stepped or self.events:
                self.send()
        for request_id in list(self.active):
            self.abort(request_id)
        self.send()

    def send(self) -> None:
        self.outbox.post((self.events, engine_stats(self.engine)))
        self.events = []

    def take_all(self, messages: list[tuple]) -> None:
        for message in messages:
            self.take(message)

    def take(self, message: tuple) -> None:
        kind, *args = message
        if kind == "add":
            self.add(*args)
        elif kind == "abort":
            request_id, token = args
            self.abort(request_id)
            self.events.append(("aborted", token))
        else:
            self.stopping = True

    def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        priority: int,
        streaming: bool,
    ) -> None:
        try:
            samples, cursors = admit(self.engine, prompt_token_ids, params, priority)
        except Exception as error:  # noqa: BLE001 - the request's caller gets it, the engine runs on
            self.events.append(("accepted", request_id, picklable(error)))
            return
        self.active[request_id] = _Request(prompt_token_ids, streaming, samples, cursors)
        self.events.append(("accepted", request_id, None))

    def abort(self, request_id: str) -> None:
        request = self.active.get(request_id)
        if request is None:
            return  # unknown or just finished
        for delta in drop(self.engine, request.samples, request.cursors):
            self.events.append(("delta", request_id, delta))
        self.end(request_id)

    def step(self) -> None:
        streaming = any(request.streaming for request in self.active.values())
        if (error := serve_step(self.engine, streaming)) is not None:
            error = picklable(error)
            for request_id in list(self.active):
                self.events.append(("error", request_id, error))
                self.end(request_id)
            return
        for request_id, request in list(self.active.items()):
            for cursor in request.cursors:
                if (delta := cursor.delta()) is not None:
                    self.events.append(("delta", request_id, delta))
            if all(cursor.done for cursor in request.cursors):
                self.end(request_id)

    def end(self, request_id: str) -> None:
        request = self.active.pop(request_id)
        self.events.append(("end", request_id, FinishedRequest.of(request.prompt_token_ids, request.samples)))
