"""How many streamed tokens a second the OpenAI server's HTTP side can deliver, with the engine's cost taken
away: a stand-in engine hands every running request one token each `--step-ms` (one wake-up of the event
loop per step, as the engine's process does), and the serving benchmark's load (`LoadProcesses`, all
requests at once) reads them. What bounds `+experiment=serving` above saturation when it is not the engine:
the server's event loop, its HTTP implementation (uvicorn's `--loop` and `--http`), or the load's client
processes (`--load-processes`, each sending its share of the requests). At a low `--rate` (requests a
second, Poisson arrivals) its TTFT is the least the HTTP side adds to an engine's: the way in and out of the
server with the load's client, plus on average half a stand-in step.

    python -m experiments.studies.serving_http_ceiling [--requests 200] [--tokens 256] [--step-ms 2]
        [--loop auto|asyncio|uvloop] [--http auto|h11|httptools] [--load-processes 1] [--rate inf]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import threading
from contextlib import contextmanager

from experiments.runners.serving_client import LoadProcesses, arrival_gaps
from experiments.runners.serving_stats import serving_metrics
from nvllm.engine.request_validation import token_ids_of
from nvllm.outputs import CompletionOutput
from nvllm.sampling_params import SamplingParams
from nvllm.serving.app import build_app
from nvllm.serving.async_engine import END, ServedRequest, settle
from nvllm.serving.metrics import ServerMetrics
from nvllm.serving.served_engine import EngineStats
from nvllm.serving.server import background_server
from nvllm.tokenizer.tokenizer import load_tokenizer

TOKEN_ID, TOKEN_TEXT = 1350, " the"


class StandInEngine:
    """The served-engine interface (nvllm.serving.served_engine.ServedEngine) with no model: each step, every
    running request gets one more token, until its `max_tokens`."""

    def __init__(self, step_s: float):
        self.tokenizer = load_tokenizer(None)
        self.max_model_len = 1 << 20
        self.step_s = step_s
        self._active: dict[str, tuple[ServedRequest, list[int]]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._steps, name="stand-in-engine", daemon=True)
        self._thread.start()

    num_active = property(lambda self: len(self._active))
    failure = None

    def tokenize(self, prompt) -> list[int]:
        return token_ids_of(prompt, self.tokenizer)

    async def add_request(self, prompt, params: SamplingParams, request_id=None, priority=0, streaming=True):
        request_id = request_id or f"req-{next(self._ids)}"
        request = ServedRequest.taken(request_id, self.tokenize(prompt), params, priority, streaming)
        with self._lock:
            self._active[request.request_id] = (request, [0])
        settle(request.accepted, None)
        return request

    def abort(self, request_id: str) -> asyncio.Future:
        with self._lock:
            self._active.pop(request_id, None)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def stats(self) -> EngineStats:
        return EngineStats()

    def shutdown(self) -> None:
        self._stopping.set()
        self._thread.join()

    def _steps(self) -> None:
        while not self._stopping.wait(self.step_s):
            handed: dict[asyncio.AbstractEventLoop, list] = {}
            with self._lock:
                for request_id, (request, produced) in list(self._active.items()):
                    produced[0] += 1
                    done = produced[0] >= request.params.max_tokens
                    delta = CompletionOutput(0, TOKEN_TEXT, [TOKEN_ID], "length" if done else None)
                    items = handed.setdefault(request.loop, [])
                    items.append((request.outputs, delta))
                    if done:
                        items.append((request.outputs, END))
                        del self._active[request_id]
            for loop, items in handed.items():
                loop.call_soon_threadsafe(_put_all, items)


def _put_all(items: list) -> None:
    for outputs, item in items:
        outputs.put_nowait(item)


@contextmanager
def stand_in_server(step_s: float, loop: str, http: str):
    engine = StandInEngine(step_s)
    app = build_app(engine, ServerMetrics(engine.stats), model_name="stand-in")
    with background_server(app, loop=loop, http=http) as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=256, help="output tokens of each request")
    parser.add_argument("--step-ms", type=float, default=2.0, help="ms between the stand-in engine's steps")
    parser.add_argument("--loop", default="auto", help="uvicorn's event loop: auto, asyncio or uvloop")
    parser.add_argument(
        "--http", default="auto", help="uvicorn's HTTP implementation: auto, h11 or httptools"
    )
    parser.add_argument("--load-processes", type=int, default=1)
    parser.add_argument(
        "--rate", type=float, default=float("inf"), help="requests a second (inf: all at once)"
    )
    args = parser.parse_args()
    prompts = [[TOKEN_ID] * 8 for _ in range(args.requests)]
    params = [SamplingParams(max_tokens=args.tokens, ignore_eos=True)] * args.requests
    with (
        stand_in_server(args.step_ms / 1e3, args.loop, args.http) as url,
        LoadProcesses(args.load_processes) as load,
    ):
        gaps = arrival_gaps(len(prompts), args.rate, burstiness=1.0, seed=0)
        timings, duration = load.send(url, "stand-in", prompts, params, gaps)
    metrics = serving_metrics(timings, duration, ttft_slo_ms=1e9, tpot_slo_ms=1e9)
    offered = args.requests / (args.step_ms / 1e3)
    print(
        f"{args.requests} streams x {args.tokens} tokens, a step each {args.step_ms} ms "
        f"({offered:,.0f} tok/s offered), loop {args.loop}, http {args.http}, "
        f"{args.load_processes} load process(es), rate {args.rate:g} req/s: "
        f"{metrics['output_tok_per_s']:,.0f} tok/s delivered, "
        f"{metrics['tokens_per_chunk']:.2f} tokens a chunk, "
        f"TTFT p50 / p99 {metrics['ttft_p50_ms']:.2f} / {metrics['ttft_p99_ms']:.2f} ms, "
        + (f"ITL p50 {metrics['itl_p50_ms']:.2f} ms, " if metrics["itl_p50_ms"] is not None else "")
        + f"failed {metrics['failed']}",
        flush=True,
    )


if __name__ == "__main__":
    main()
