"""ASGI middleware: request metrics, and the request body size limit (413 before any parsing)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.metrics import HTTP_LATENCY, HTTP_REQUESTS, UNMATCHED_ROUTE
from api.problems import PROBLEM_JSON, problem_bytes


class MetricsMiddleware:
    """Counts requests and their latency by route template (not by raw path)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server error middleware answers if the app raises

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", UNMATCHED_ROUTE) if route is not None else UNMATCHED_ROUTE
            method = scope["method"]
            HTTP_REQUESTS.labels(template, method, str(status)).inc()
            HTTP_LATENCY.labels(template, method).observe(time.perf_counter() - started)


class BodyLimitMiddleware:
    """Answers 413 when a body is larger than `max_bytes`, declared (Content-Length) or streamed
    (chunked). Bodies are small JSON documents, so buffering the allowed ones is cheap."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, send)
            return
        chunks: list[bytes] = []
        size = 0
        disconnect: Message | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                disconnect = message  # the client left: hand that to the app instead of a body
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        first: Message = disconnect or {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        body = problem_bytes(
            status=413,
            detail=f"the request body is larger than {self.max_bytes} bytes",
            instance=scope.get("path", ""),
            slug="body-too-large",
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
