"""The engine for an asyncio program: requests are added and aborted at any time from the event loop, each
with its own async stream of output deltas, while one background thread owns the engine and steps it as
long as there is work. The event loop never waits for a step: intake and aborts are queued for the thread,
which takes them between steps (under the engine's lock, nvllm/engine/ownership.py)."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from nvllm.engine.llm_engine import LLMEngine
from nvllm.engine.request_outputs import StreamCursor
from nvllm.engine.request_validation import Prompt, check_priority, token_ids_of
from nvllm.outputs import CompletionOutput
from nvllm.sampling_params import SamplingParams
from nvllm.scheduler.sequence import Sequence
from nvllm.serving.served_engine import EngineStats, FinishedRequest, engine_stats
from nvllm.serving.serving_rules import admit, drop, serve_step

END = object()  # the last item of a request's stream


@dataclass
class ServedRequest:
    """One request as the engine serves it; its stream is read on the event loop."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int
    streaming: bool
    loop: asyncio.AbstractEventLoop
    outputs: asyncio.Queue = field(default_factory=asyncio.Queue)
    accepted: asyncio.Future | None = None
    samples: list[Sequence] = field(default_factory=list)  # the sequence and its forks, once queued
    cursors: list[StreamCursor] = field(default_factory=list)

    @classmethod
    def taken(
        cls,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        priority: int,
        streaming: bool,
    ) -> ServedRequest:
        """A request taken on the running event loop, which awaits its acceptance and reads its stream."""
        loop = asyncio.get_running_loop()
        return cls(
            request_id=request_id,
            prompt_token_ids=prompt_token_ids,
            params=params,
            priority=check_priority(priority),
            streaming=streaming,
            loop=loop,
            accepted=loop.create_future(),
        )

    def put(self, item: object) -> None:
        """Hand an item to the event loop (from the engine's thread); dropped once that loop is closed."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.outputs.put_nowait, item)

    async def deltas(self) -> AsyncIterator[CompletionOutput]:
        """Each sample's new tokens and text as they reach the host (`CompletionOutput.index`: the sample);
        the deltas of a sample add up to its `generate` output. Raises what failed its step. A reader that
        fell behind gets what queued up meanwhile as one delta per sample: each token leaves as soon as it
        can, and a loaded server spends its time on tokens, not on chunks."""
        while True:
            items = [await self.outputs.get()]
            while not self.outputs.empty():
                items.append(self.outputs.get_nowait())
            for item in merged_deltas(items):
                if item is END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item

    @property
    def is_finished(self) -> bool:
        return bool(self.cursors) and all(cursor.done for cursor in self.cursors)


class AsyncEngine:
    """Serves an `LLMEngine` (e.g. an `LLM`) from an asyncio loop. `on_finished(request)` is called on the
    engine's thread for each request that ends (metrics)."""

    def __init__(self, engine: LLMEngine, on_finished: Callable[[FinishedRequest], None] | None = None):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.max_model_len = engine.config.scheduler.max_model_len
        self.on_finished = on_finished
        self._intake: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._active: dict[str, ServedRequest] = {}
        self._ids = itertools.count()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="nvllm-engine", daemon=True)
        self._thread.start()

    @property
    def num_active(self) -> int:
        return len(self._active)

    @property
    def failure(self) -> str | None:
        return None  # a failed step fails its requests; the engine serves on

    def tokenize(self, prompt: Prompt) -> list[int]:
        return token_ids_of(prompt, self.engine.tokenizer)

    def stats(self) -> EngineStats:
        return engine_stats(self.engine)

    async def add_request(
        self,
        prompt: Prompt,
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        streaming: bool = True,
    ) -> ServedRequest:
        """Queue a request; returns once the engine took it (a bad one raises its ValueError here).
        `streaming`: its tokens go out as soon as each is sampled (decode rounds of one step while any such
        request runs), else multi-step rounds keep their throughput."""
        request_id = request_id or f"req-{next(self._ids)}"
        request = ServedRequest.taken(request_id, self.tokenize(prompt), params, priority, streaming)
        if request.request_id in self._active:
            raise ValueError(f"request id {request.request_id!r} is already running")
        self._submit(lambda: self._start(request))
        await request.accepted
        return request

    def abort(self, request_id: str) -> asyncio.Future:
        """Drop a request: its KV blocks and token-table row are free when the returned future is done, and
        its stream ends with finish reason "abort". Unknown or finished ids are ignored (it may have just
        finished). Not awaiting is fine (a disconnected client's handler, whose awaits are cancelled)."""
        done = asyncio.get_running_loop().create_future()
        if self._closing:  # shutdown aborts every request
            done.set_result(None)
        else:
            self._submit(lambda: self._abort(request_id, done))
        return done

    def shutdown(self) -> None:
        """Abort what runs, stop the thread, release the engine's device memory."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        self._thread.join()
        self.engine.shutdown()

    # ---- the engine's thread ------------------------------------------------------------------------
    def _submit(self, work: Callable[[], None]) -> None:
        if self._closing:
            raise RuntimeError("the server is shutting down")
        self._intake.put(work)
        self._wake.set()

    def _run(self) -> None:
        while not self._closing:
            self._wake.wait()
            self._wake.clear()
            while not self._closing:
                self._take_intake()
                if self.engine.is_finished():
                    break
                self._step()
        self._take_intake()
        for request_id in list(self._active):
            self._abort(request_id, None)

    def _take_intake(self) -> None:
        while True:
            try:
                work = self._intake.get_nowait()
            except queue.Empty:
                return
            work()

    def _start(self, request: ServedRequest) -> None:
        try:
            request.samples, request.cursors = admit(
                self.engine, request.prompt_token_ids, request.params, request.priority
            )
        except Exception as error:  # noqa: BLE001 - the request's caller gets it, the engine runs on
            _resolve(request.loop, request.accepted, error)
            return
        self._active[request.request_id] = request
        _resolve(request.loop, request.accepted, None)

    def _abort(self, request_id: str, done: asyncio.Future | None) -> None:
        request = self._active.pop(request_id, None)
        if request is not None:
            for delta in drop(self.engine, request.samples, request.cursors):
                request.put(delta)
            self._end(request)
        if done is not None:
            _resolve(done.get_loop(), done, None)

    def _step(self) -> None:
        streaming = any(request.streaming for request in self._active.values())
        if (error := serve_step(self.engine, streaming)) is not None:
            for request in list(self._active.values()):
                self._active.pop(request.request_id)  # gone before its caller hears of the error
                request.put(error)
                self._end(request)
            return
        # one hand-over per event loop and step: waking a loop costs a system call
        handed: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, object]]] = {}
        for request in list(self._active.values()):
            items = handed.setdefault(request.loop, [])
            items.extend(
                (request.outputs, delta)
                for cursor in request.cursors
                if (delta := cursor.delta()) is not None
            )
            if request.is_finished:
                self._end(request, items)
        for loop, items in handed.items():
            if items and not loop.is_closed():
                loop.call_soon_threadsafe(_put_all, items)

    def _end(self, request: ServedRequest, handed: list[tuple[asyncio.Queue, object]] | None = None) -> None:
        """The request's stream ends (after the items of `handed`, when its step hands them over)."""
        self._active.pop(request.request_id, None)
        if handed is None:
            request.put(END)
        else:
            handed.append((request.outputs, END))
        if self.on_finished is not None:
            self.on_finished(FinishedRequest.of(request.prompt_token_ids, request.samples))


def _put_all(items: list[tuple[asyncio.Queue, object]]) -> None:
    for outputs, item in items:
        outputs.put_nowait(item)


def merged_deltas(items: list[object]) -> list[object]:
    """`items` with each run of deltas of one sample (no other item of that sample between) as one delta:
    texts, tokens and log-probabilities joined, the last one's finish and stop reasons."""
    merged: list[object] = []
    latest: dict[int, int] = {}  # sample -> where its open delta is in `merged`
    for item in items:
        if not isinstance(item, CompletionOutput):
            latest.clear()
            merged.append(item)
            continue
        at = latest.get(item.index)
        if at is None or merged[at].finish_reason is not None:
            latest[item.index] = len(merged)
            merged.append(item)
            continue
        before = merged[at]
        merged[at] = CompletionOutput(
            item.index,
            before.text + item.text,
            before.token_ids + item.token_ids,
            item.finish_reason,
            item.stop_reason,
            None if before.logprobs is None else before.logprobs + (item.logprobs or []),
            item.cumulative_logprob,
        )
    return merged


def settle(future: asyncio.Future, error: BaseException | None) -> None:
    """Resolve `future` (on its loop) with None or `error`, unless it is done (cancelled) already."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _resolve(loop: asyncio.AbstractEventLoop, future: asyncio.Future, error: BaseException | None) -> None:
    if not loop.is_closed():
        loop.call_soon_threadsafe(settle, future, error)
