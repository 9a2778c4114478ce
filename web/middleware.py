"""ASGI middleware: one access-log line and one count per non-speech request, a bound on request bodies as they
arrive, and a quiet end for streamed answers cut mid-way.

Plain ASGI rather than BaseHTTPMiddleware, which would buffer streamed bodies and hide client disconnects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from errors import PayloadTooLarge, StreamCut
from web.front_spec import Front, front_for
from web.http_errors import SPEECH_ROUTE, error_response, refuse, route_path, stream_cut
from web.request_ids import REQUEST_ID

log = logging.getLogger("polytts.server")
UNMATCHED = "(none)"
"""The route label of a request no route takes (an unknown path, a method the path lacks)."""
_STATUS_OF = {"websocket.accept": 101, "websocket.close": 403}
"""A WebSocket's status in its line: accepted, or closed before the handshake completed (what the client sees)."""


class CutStreams:
    """Ends a request whose streamed body was cut (StreamCut) by returning with its response incomplete: the server
    then closes the connection, and the failure's own log line is all the log holds of it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except StreamCut as exc:
            log.debug("stream cut: %s", exc)
            stream_cut()


class AccessLog:
    """One log line per request with its status, time and id, and one count in `polytts_http_requests_total` by
    route template and status: refusals before any route (a 401, a 404 on an unknown path, a refused handshake)
    included. A speech route's request (a route under `own_log`) gets the lifecycle's line and count instead, with
    audio timings, even when refused before the route ran (`http_errors.refuse`): it is marked with its route in its
    scope's state (SPEECH_ROUTE)."""

    def __init__(self, app: ASGIApp, own_log: tuple[str, ...]) -> None:
        self.app = app
        self.own_log = own_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith(self.own_log):
            # The route's template, not the path: a metric label per path a client sends would grow without bound.
            route = route_path(scope["app"].router.routes, scope)
            if route is not None:
                scope.setdefault("state", {})[SPEECH_ROUTE] = route.strip("/")
                await self.app(scope, receive, send)
                return
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            kind = message["type"]
            if kind in ("http.response.start", "websocket.http.response.start"):
                status = message["status"]
            elif kind in _STATUS_OF and status == 500:  # the first answer decides: a close after an accept is no 403
                status = _STATUS_OF[kind]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            method = scope["method"] if scope["type"] == "http" else "WEBSOCKET"
            request_id = scope.get("state", {}).get(REQUEST_ID, "-")
            took = time.perf_counter() - started
            log.info("%s %s %d %.3fs id=%s", method, scope["path"], status, took, request_id)
            route = route_path(scope["app"].router.routes, scope)
            metrics = scope["app"].state.service.metrics
            metrics.http_requests.labels(route or UNMATCHED, str(status)).inc()


class BodyLimit:
    """Refuse a request body over `limit` bytes with 413, from its Content-Length at once or while it arrives, so
    nothing reads (or parses) more than the limit. Paths in `own_limits` bound their bodies themselves (uploads
    count each file; a live text stream counts its text). A refusal is in the body of the path's front."""

    def __init__(
        self, app: ASGIApp, limit: int, own_limits: tuple[str, ...], retry_after: float, fronts: Sequence[Front]
    ) -> None:
        self.app = app
        self.limit = limit
        self.own_limits = own_limits
        self.retry_after = retry_after
        self.fronts = fronts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.own_limits:
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLarge(f"request body is larger than {self.limit} bytes", code="body_too_large")
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await refuse(too_large, self.retry_after, self.fronts, scope, receive, send)
            return
        received = 0
        refused = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    # The route sees the body end here; its answer is replaced by the 413 below.
                    return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                if not started:
                    started = True
                    error_body = front_for(self.fronts, scope["path"]).error_body
                    await error_response(too_large, self.retry_after, error_body)(scope, receive, send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted_receive, guarded_send)
