"""The checks every request passes before its route: the API key on /v1 routes (when the server has one) and
the body's declared size. Plain ASGI middleware: Starlette's `@app.middleware("http")` would pass every chunk
of a streamed response through an extra task and memory stream, a cost paid per token."""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from nvllm.serving.responses import error_body


def error(message: str, status: int) -> JSONResponse:
    return JSONResponse(error_body(message, status), status_code=status)


class RequestGuard:
    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int):
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.refusal(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
        else:
            await refusal(scope, receive, send)

    def refusal(self, scope: Scope) -> JSONResponse | None:
        headers = dict(scope["headers"])
        if self.api_key is not None and scope["path"].startswith("/v1"):
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, f"Bearer {self.api_key}".encode()):
                return error("missing or wrong API key (Authorization: Bearer <key>)", 401)
        length = headers.get(b"content-length", b"").decode("latin-1")
        if length.isdigit() and int(length) > self.max_body_bytes:
            return error(f"request body of {length} bytes exceeds the limit of {self.max_body_bytes}", 413)
        return None
