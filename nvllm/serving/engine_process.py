"""The engine in a process of its own, served from the server's asyncio loop: the HTTP side and the engine's
steps then each have an interpreter (and its lock) to themselves. `EngineProcess` has AsyncEngine's
interface; requests and aborts go to the child from a thread of their own (`PipeSender`: the event loop never
waits for the child to read), and the child (engine_child.py) steps the engine and sends one message per
step, which a reader thread here hands to the event loop with one wake-up. A child that dies fails what
runs with a clear error, and every later request is refused (503)."""

from __future__ import annotations

import asyncio
import atexit
import itertools
import multiprocessing
import threading
from collections.abc import Callable

from nvllm.config import EngineConfig
from nvllm.engine.request_validation import Prompt, token_ids_of
from nvllm.sampling_params import SamplingParams
from nvllm.serving.async_engine import END, ServedRequest, settle
from nvllm.serving.engine_child import run_engine
from nvllm.serving.pipe_sender import PipeSender
from nvllm.serving.served_engine import EngineStats, FinishedRequest
from nvllm.tokenizer.tokenizer import load_tokenizer

STOP_S = 60  # how long the child may take to abort its requests and release the device, before it is killed

Action = tuple[Callable[..., None], tuple]


class EngineProcess:
    """Builds an engine of `config` in a spawned process and serves it; `on_finished(request)` is called
    on the reader thread for each request that ends (metrics). With `profile.enabled`, the engine's profile
    is written to `profile_dir` at shutdown (`run_engine`)."""

    def __init__(
        self,
        config: EngineConfig,
        on_finished: Callable[[FinishedRequest], None] | None = None,
        profile_dir: str | None = None,
    ):
        self.on_finished = on_finished
        self.tokenizer = load_tokenizer(config.model.path)  # the child's: the same files
        self.max_model_len = config.scheduler.max_model_len
        self._stats = EngineStats()
        self._active: dict[str, ServedRequest] = {}
        self._aborts: dict[int, asyncio.Future] = {}
        self._ids, self._tokens = itertools.count(), itertools.count()
        self._closing = False
        self._ended: str | None = None  # why the child is gone, once it is
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        # not a daemon: a tensor-parallel engine starts worker processes of its own
        self._process = context.Process(
            target=run_engine, args=(child_conn, config, profile_dir), name="nvllm-engine"
        )
        self._process.start()
        child_conn.close()
        self._wait_ready()
        self._sender = PipeSender(self._conn, "nvllm-engine-sender")
        self._reader = threading.Thread(target=self._read, name="nvllm-engine-reader", daemon=True)
        self._reader.start()
        atexit.register(self.shutdown)

    def _wait_ready(self) -> None:
        try:
            kind, error = self._conn.recv()
        except EOFError:
            kind, error = "failed", None
        if kind == "ready":
            return
        self._process.join()
        self._conn.close()
        raise error or RuntimeError(f"the engine's process exited (code {self._process.exitcode}) starting")

    @property
    def num_active(self) -> int:
        return len(self._active)

    @property
    def failure(self) -> str | None:
        return self._ended

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def tokenize(self, prompt: Prompt) -> list[int]:
        return token_ids_of(prompt, self.tokenizer)

    def stats(self) -> EngineStats:
        """The engine's state after its latest step."""
        return self._stats

    async def add_request(
        self,
        prompt: Prompt,
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        streaming: bool = True,
    ) -> ServedRequest:
        """As `AsyncEngine.add_request`; a RuntimeError once the child is gone or shutting down."""
        request_id = request_id or f"req-{next(self._ids)}"
        request = ServedRequest.taken(request_id, self.tokenize(prompt), params, priority, streaming)
        if request_id in self._active:
            raise ValueError(f"request id {request_id!r} is already running")
        self._active[request_id] = request
        try:
            self._send(("add", request_id, request.prompt_token_ids, params, request.priority, streaming))
        except RuntimeError:
            self._active.pop(request_id, None)
            raise
        try:
            await request.accepted  # a rejected request left `_active` on the reader thread
        except asyncio.CancelledError:
            self.abort(request_id)  # the child may have taken it: it is dropped there too
            raise
        return request

    def abort(self, request_id: str) -> asyncio.Future:
        """As `AsyncEngine.abort`: the future is done once the child freed the request's blocks."""
        done = asyncio.get_running_loop().create_future()
        if request_id not in self._active:
            done.set_result(None)
            return done
        token = next(self._tokens)
        self._aborts[token] = done
        try:
            self._send(("abort", request_id, token))
        except RuntimeError:  # the child is gone or stops: it aborts every request
            self._aborts.pop(token, None)
            done.set_result(None)
        return done

    def shutdown(self) -> None:
        """Abort what runs, stop the child (killed if it does not end within `STOP_S`) and join it."""
        if self._closing:
            return
        self._closing = True
        atexit.unregister(self.shutdown)
        try:
            self._sender.post(("stop",))
        except OSError:
            pass  # already gone
        self._sender.close(STOP_S)
        self._process.join(STOP_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._reader.join()
        self._conn.close()

    def _send(self, message: tuple) -> None:
        if self._ended is not None:
            raise RuntimeError(self._ended)
        if self._closing:
            raise RuntimeError("the server is shutting down")
        try:
            self._sender.post(message)
        except OSError:
            raise RuntimeError(self._ended or "the engine's process is gone") from None

    # ---- the reader thread --------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while True:
                messages = self._conn.recv()  # each step's (events, stats) since the last read
                self._stats = messages[-1][1]
                self._hand_over([event for events, _ in messages for event in events])
        except (EOFError, OSError):
            pass  # the child ended
        except Exception:  # noqa: BLE001 - a message that cannot be read: nothing it sends can be trusted
            self._process.kill()
        self._process.join(STOP_S)
        self._ended = f"the engine's process ended (exit code {self._process.exitcode})"
        self._fail_all()

    def _hand_over(self, events: list[tuple]) -> None:
        """The step's events to their event loops: one wake-up per loop."""
        handed: dict[asyncio.AbstractEventLoop, list[Action]] = {}
        for kind, key, value in _triples(events):
            if kind == "aborted":
                done = self._aborts.pop(key, None)
                if done is not None:
                    handed.setdefault(done.get_loop(), []).append((settle, (done, None)))
                continue
            request = self._active.get(key)
            if request is None:
                continue
            actions = handed.setdefault(request.loop, [])
            if kind == "accepted":
                actions.append((settle, (request.accepted, value)))
                if value is not None:
                    self._active.pop(key, None)
            elif kind in ("delta", "error"):
                actions.append((request.outputs.put_nowait, (value,)))
            else:  # end
                self._active.pop(key, None)
                actions.append((request.outputs.put_nowait, (END,)))
                if self.on_finished is not None:
                    self.on_finished(value)
        for loop, actions in handed.items():
            if actions and not loop.is_closed():
                loop.call_soon_threadsafe(_run_all, actions)

    def _fail_all(self) -> None:
        """The child is gone: what still runs fails, what waits for it is resolved."""
        error = RuntimeError(self._ended)
        handed: dict[asyncio.AbstractEventLoop, list[Action]] = {}
        for request_id in list(self._active):
            request = self._active.pop(request_id)
            actions = handed.setdefault(request.loop, [])
            actions += [(settle, (request.accepted, error)), (request.outputs.put_nowait, (error,))]
            actions.append((request.outputs.put_nowait, (END,)))
        for token in list(self._aborts):
            done = self._aborts.pop(token)
            handed.setdefault(done.get_loop(), []).append((settle, (done, None)))
        for loop, actions in handed.items():
            if not loop.is_closed():
                loop.call_soon_threadsafe(_run_all, actions)


def _triples(events: list[tuple]) -> list[tuple]:
    """Each event as (kind, key, value): "aborted" events carry no value."""
    return [event if len(event) == 3 else (*event, None) for event in events]


def _run_all(actions: list[Action]) -> None:
    for action, args in actions:
        action(*args)
