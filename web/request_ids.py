"""ASGI middleware: every request gets an id, `X-Request-Id`, on its answer and in its log line.

The client's own id is kept when it sent a usable one (tracing through a proxy or an agent framework); anything else
gets a new one. The id is set before anything else runs: in the scope's state (REQUEST_ID, for the access log and the
routes) and in the lifecycle's `request_context.REQUEST_ID` (for a speech request's line), and it is added to whatever
starts the answer: an HTTP response, a WebSocket accept, a denied handshake; the 500 of an unexpected error, sent
from outside every middleware, takes it from the scope (`header`).
"""

from __future__ import annotations

import uuid

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lifecycle import request_context

REQUEST_ID = "request_id"
"""The key of a scope's state that holds the request's id."""
HEADER = "x-request-id"
MAX_REQUEST_ID_CHARS = 128
_ANSWER_STARTS = ("http.response.start", "websocket.accept", "websocket.http.response.start")


def usable(given: str) -> bool:
    """A client's id is kept when it is at most MAX_REQUEST_ID_CHARS visible ASCII characters: it goes into log
    lines (no spaces, no control characters, which could forge a line) and back out in a header."""
    return 0 < len(given) <= MAX_REQUEST_ID_CHARS and all("!" <= char <= "~" for char in given)


class RequestIds:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get(HEADER, "")
        request_id = given if usable(given) else uuid.uuid4().hex
        scope.setdefault("state", {})[REQUEST_ID] = request_id
        header = (HEADER.encode(), request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] in _ANSWER_STARTS:
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        token = request_context.REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_context.REQUEST_ID.reset(token)


def header(scope: Scope) -> dict[str, str]:
    """The request's id as a header, for the one answer that does not pass through RequestIds: the 500 of an
    unexpected error, which Starlette's ServerErrorMiddleware sends from outside every middleware."""
    request_id = scope.get("state", {}).get(REQUEST_ID)
    return {HEADER: request_id} if request_id else {}
