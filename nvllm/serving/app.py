"""The OpenAI-compatible HTTP app (FastAPI): /v1/completions, /v1/chat/completions (streamed as server-sent
events or whole), /v1/models, /health, /metrics. Bad requests get 400 (401, 404, 413) in OpenAI's error
shape and leave the engine serving; a client that leaves has its request aborted."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from nvllm.serving.async_engine import ServedRequest
from nvllm.serving.metrics import ServerMetrics
from nvllm.serving.request_guard import RequestGuard, error
from nvllm.serving.request_mapping import Endpoint, sampling_params
from nvllm.serving.responses import envelope, error_body, sse, usage
from nvllm.serving.served_engine import ServedEngine
from nvllm.serving.streamed_choices import ChoiceAccumulator
from nvllm.tokenizer.chat import chat_prompts

MAX_BODY_BYTES = 4 * 2**20
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for /v1/completions


class RequestError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def build_app(
    engine: ServedEngine,
    metrics: ServerMetrics,
    model_name: str,
    api_key: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> FastAPI:
    """The app serving `engine` as model `model_name`; with `api_key`, /v1 routes need `Authorization:
    Bearer <api_key>`. Shutting the app down (SIGTERM under uvicorn) aborts what still runs and releases
    the engine's device memory."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await asyncio.to_thread(engine.shutdown)

    app = FastAPI(title="nvllm", lifespan=lifespan)
    app.state.engine = engine  # for those who serve it in-process: e.g. the serving experiment's engine times
    tokenizer = engine.tokenizer
    max_model_len = engine.max_model_len

    app.add_middleware(RequestGuard, api_key=api_key, max_body_bytes=max_body_bytes)

    @app.exception_handler(RequestError)
    async def request_error(raw: Request, exc: RequestError) -> JSONResponse:
        return error(str(exc), exc.status)

    @app.get("/health")
    async def health() -> Response:
        if engine.failure is not None:
            return error(engine.failure, 503)
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(metrics.exposition(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": model_name, "object": "model", "created": int(time.time()), "owned_by": "nvllm",
                "max_model_len": max_model_len}  # fmt: skip
        return {"object": "list", "data": [card]}

    async def read_body(raw: Request) -> dict[str, Any]:
        data = await raw.body()
        if len(data) > max_body_bytes:
            raise RequestError(
                f"request body of {len(data)} bytes exceeds the limit of {max_body_bytes}", 413
            )
        try:
            body = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"malformed JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if body.get("model", model_name) != model_name:
            raise RequestError(
                f"model {body['model']!r} does not exist; this server serves {model_name!r}", 404
            )
        return body

    def prompt_of(body: dict, endpoint: Endpoint) -> list[int]:
        if endpoint == "chat":
            return chat_prompts(tokenizer, body.get("messages"), body.get("chat_template_kwargs"))[0]
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if not isinstance(prompt, str) and not (isinstance(prompt, list) and prompt):
            raise ValueError("prompt must be a string or a list of token ids (one prompt per request)")
        return engine.tokenize(prompt)

    async def serve(raw: Request, endpoint: Endpoint) -> Response:
        body = await read_body(raw)
        try:
            prompt = prompt_of(body, endpoint)
            default_max_tokens = (
                COMPLETIONS_DEFAULT_MAX_TOKENS
                if endpoint == "completions"
                else max(1, max_model_len - len(prompt))
            )
            params = sampling_params(body, endpoint, default_max_tokens)
            stream = body.get("stream") or False
            if not isinstance(stream, bool):
                raise ValueError(f"stream={stream!r} must be true or false")
            options = body.get("stream_options") or {}
            if not isinstance(options, dict):
                raise ValueError(f"stream_options={options!r} must be an object")
            request = await engine.add_request(
                prompt, params, priority=body.get("priority", 0), streaming=stream
            )
        except (ValueError, TypeError) as exc:
            raise RequestError(str(exc)) from None
        except RuntimeError as exc:  # shutting down, or the engine's process ended
            raise RequestError(str(exc), 503) from None
        choices = ChoiceAccumulator(endpoint, params, tokenizer)
        if stream:
            return StreamingResponse(
                stream_events(request, choices, bool(options.get("include_usage"))),
                media_type="text/event-stream",
            )
        return await whole_response(raw, request, choices)

    def chunk_kind(endpoint: Endpoint) -> str:
        return "chat.completion.chunk" if endpoint == "chat" else "text_completion"

    async def stream_events(request: ServedRequest, choices: ChoiceAccumulator, include_usage: bool):
        kind, request_id = chunk_kind(choices.endpoint), request.request_id
        ended = False
        try:
            for opening in choices.openings():
                yield sse(envelope(request_id, kind, model_name, [opening]))
            async for delta in request.deltas():
                yield sse(envelope(request_id, kind, model_name, [choices.chunk(delta)]))
            ended = True
            if include_usage:
                final = envelope(request_id, kind, model_name, [])
                yield sse({**final, "usage": usage(len(request.prompt_token_ids), choices.num_tokens)})
        except Exception as exc:  # noqa: BLE001 - the stream has begun: the error goes in it
            ended = True
            yield sse(error_body(f"generation failed: {exc}", 500))
        finally:
            if not ended:  # the client left
                engine.abort(request.request_id)
        yield sse("[DONE]")

    async def whole_response(raw: Request, request: ServedRequest, choices: ChoiceAccumulator) -> Response:
        watcher = asyncio.create_task(abort_on_disconnect(raw, request.request_id))
        try:
            async for delta in request.deltas():
                choices.add(delta)
        except Exception as exc:  # noqa: BLE001 - this request failed; the server serves on
            return error(f"generation failed: {exc}", 500)
        finally:
            watcher.cancel()
        kind = "chat.completion" if choices.endpoint == "chat" else "text_completion"
        response = envelope(request.request_id, kind, model_name, choices.whole())
        return JSONResponse({**response, "usage": usage(len(request.prompt_token_ids), choices.num_tokens)})

    async def abort_on_disconnect(raw: Request, request_id: str) -> None:
        while not await raw.is_disconnected():
            await asyncio.sleep(0.1)
        engine.abort(request_id)

    @app.post("/v1/completions")
    async def completions(raw: Request) -> Response:
        return await serve(raw, "completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(raw: Request) -> Response:
        return await serve(raw, "chat")

    return app
