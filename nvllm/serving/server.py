"""`nvllm serve MODEL`: an engine, its async loop and the OpenAI app, served by uvicorn. uvicorn turns
SIGTERM and Ctrl-C into a graceful shutdown: no new connections, running requests get
`DRAIN_SECONDS` to finish, then the app's shutdown aborts the rest and releases the device."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

from nvllm.config import EngineConfig
from nvllm.engine.config_resolution import engine_config
from nvllm.engine.llm_engine import LLMEngine
from nvllm.llm import LLM
from nvllm.serving.app import build_app
from nvllm.serving.async_engine import AsyncEngine
from nvllm.serving.engine_process import EngineProcess
from nvllm.serving.metrics import ServerMetrics

DRAIN_SECONDS = 30


def make_app(
    model: str, api_key: str | None = None, engine_process: bool = True, **overrides: Any
) -> FastAPI:
    """The app for `LLM(model, **overrides)`, named as `model` is given; with `engine_process`, the engine
    is built and stepped in a process of its own (see `process_app`)."""
    if engine_process:
        return process_app(engine_config(model, **overrides), model, api_key)
    return app_for(LLM(model, **overrides), model, api_key)


# How long a thread may hold the interpreter while another waits for it (Python's default: 5 ms). The
# engine's thread waits for each step's tokens without it, then must get it back from the HTTP loop's thread
# at once: a step of a small model is a few milliseconds of device time.
SWITCH_INTERVAL_S = 0.0005


def app_for(llm: LLMEngine, model_name: str, api_key: str | None = None) -> FastAPI:
    """The app serving `llm`; this process's threads then take turns more often (`SWITCH_INTERVAL_S`)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    engine = AsyncEngine(llm)
    metrics = ServerMetrics(engine.stats)
    engine.on_finished = metrics.request_finished
    return build_app(engine, metrics, model_name=model_name, api_key=api_key)


def process_app(
    config: EngineConfig, model_name: str, api_key: str | None = None, profile_dir: str | None = None
) -> FastAPI:
    """The app serving an engine of `config` that a spawned process builds and steps (EngineProcess): the
    HTTP loop's work (a chunk formatted and written per token) no longer takes the interpreter from the
    engine's steps. The app's shutdown stops that process (writing the engine's profile to `profile_dir`
    with `profile.enabled`)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # the reader thread hands each step on as soon as it arrives
    engine = EngineProcess(config, profile_dir=profile_dir)
    metrics = ServerMetrics(engine.stats)
    engine.on_finished = metrics.request_finished
    return build_app(engine, metrics, model_name=model_name, api_key=api_key)


def check_can_listen(host: str, port: int) -> None:
    """A ValueError if `host:port` cannot be listened on (taken, or no address of this machine), found before
    a model takes minutes to load."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as error:
        raise ValueError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


def _stopped_on_request(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def serve(
    model: str,
    host: str,
    port: int,
    api_key: str | None = None,
    engine_process: bool = True,
    **overrides: Any,
) -> None:
    """Serve until SIGTERM or Ctrl-C, then shut down gracefully and exit with code 0."""
    import uvicorn

    check_can_listen(host, port)
    app = make_app(model, api_key, engine_process, **overrides)
    # uvicorn re-raises the signal that stopped it once its shutdown is done, under the handlers it found:
    # a server stopped on request then exits cleanly, not killed by its own signal.
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, _stopped_on_request)
    uvicorn.run(app, host=host, port=port, timeout_graceful_shutdown=DRAIN_SECONDS, log_level="info")


@contextmanager
def background_server(app: FastAPI, host: str = "127.0.0.1", **uvicorn_config: Any) -> Iterator[str]:
    """`app` served by uvicorn (with `uvicorn_config`: e.g. its `loop` and `http`) on a thread of this
    process, on a free port; yields its base URL. Leaving the block shuts it down as SIGTERM would (the
    app's shutdown releases its engine)."""
    import uvicorn

    with socket.socket() as sock:
        sock.bind((host, 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", **uvicorn_config))
    thread = threading.Thread(target=server.run, name="nvllm-server", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join()
