"""`nvllm serve MODEL`: an engine, its async loop and the OpenAI app, served by uvicorn. uvicorn turns
SIGTERM and Ctrl-C into a graceful shutdown: no new connections, running requests get
`DRAIN_SECONDS` to finish, then the app's shutdown aborts the rest and releases the device."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from nvllm.llm import LLM
from nvllm.serving.app import build_app
from nvllm.serving.async_engine import AsyncEngine
from nvllm.serving.metrics import ServerMetrics

DRAIN_SECONDS = 30


def make_app(model: str, api_key: str | None = None, **overrides: Any) -> FastAPI:
    """The app for `LLM(model, **overrides)`, named as `model` is given."""
    llm = LLM(model, **overrides)
    metrics = ServerMetrics(llm)
    engine = AsyncEngine(llm, on_finished=metrics.request_finished)
    return build_app(engine, metrics, model_name=model, api_key=api_key)


def serve(model: str, host: str, port: int, api_key: str | None = None, **overrides: Any) -> None:
    import uvicorn

    app = make_app(model, api_key, **overrides)
    uvicorn.run(app, host=host, port=port, timeout_graceful_shutdown=DRAIN_SECONDS, log_level="info")
