"""The one mapping from errors onto HTTP responses: a JSON body with the right status, in the shape of the front
whose path it answers (the native `{"code", "message"}`, or a vendor's: `front_spec.Front.error_body`).

Everything that can go wrong (a domain error, a body that does not validate, an unknown route or method) becomes a
`ServiceError` first, and `error_response` renders it; 429 and 503 always carry `Retry-After`. A request refused
before its route ran is answered by `refuse` (a WebSocket handshake by `_deny_websocket`), which has a speech route's
refusal logged and counted by the lifecycle, as the route's other refusals are. A WebSocket route refuses its
handshake by raising before it accepts: the handshake is denied in the shape of the front its path belongs to.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Mapping, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketState

from errors import ServiceError, StreamCut, invalid_fields
from lifecycle.synthesis import SynthesisService
from web import request_ids
from web.front_spec import ErrorBodyOf, Front, front_for

log = logging.getLogger("polytts.errors")

_STATUS_CODES = {  # the code of each status the framework raises itself (errors.ERRORS gives their meanings)
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    426: "upgrade_required",
}


class HttpError(ServiceError):
    """An error the web framework raised itself (unknown route, method not allowed), with its status."""

    code = "http_error"

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message, code=_STATUS_CODES.get(status, "http_error"), status=status)


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """The methods of the resource a request's path names: those of every route with the path template of the first
    route that matches it (the router's 405 names only that route's, so GET /voices hid POST /voices). The first
    match decides, as it does for routing: /voices/bundle is not /voices/{voice_id}."""
    contexts = iter_route_contexts(routes)
    matching = [route for route in contexts if route.methods and route.matches(scope)[0] != Match.NONE]
    if not matching:
        return []
    template = matching[0].path
    return sorted({method for route in matching if route.path == template for method in route.methods or ()})


def route_path(routes: Sequence[BaseRoute], scope: Scope) -> str | None:
    """The path template of the route that takes this request (its path and method); None when none does."""
    for route in iter_route_contexts(routes):
        if route.matches(scope)[0] == Match.FULL:
            return route.path
    return None


def error_response(
    exc: ServiceError, retry_after: float, error_body: ErrorBodyOf, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The error's answer in `error_body` (its front's body), with its status and headers (and `headers`)."""
    if exc.status in (429, 503) and exc.retry_after is None:
        exc.retry_after = retry_after
    return JSONResponse(error_body(exc), status_code=exc.status, headers={**exc.headers(), **(headers or {})})


async def websocket_only() -> Response:
    """The GET of a WebSocket route asked without a handshake: 426 (the router answers other methods 405)."""
    raise StarletteHTTPException(426, "this route takes a WebSocket handshake", headers={"Upgrade": "websocket"})


async def cut_on_failure(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A streamed body whose service error, once its status is sent, cuts the connection (StreamCut)."""
    try:
        async for chunk in body:
            yield chunk
    except ServiceError as exc:
        raise StreamCut(f"{exc.code}: {exc.message}") from exc


SPEECH_ROUTE = "speech_route"
"""The key of a scope's state that names a speech route's request by its route (`middleware.AccessLog` sets it): its
one log line and count are the lifecycle's."""
_DENIED_HANDSHAKE: contextvars.ContextVar[bool] = contextvars.ContextVar("denied_handshake", default=False)
"""Set in the ASGI task of a WebSocket whose handshake `_deny_websocket` answered."""
_CUT_STREAM: contextvars.ContextVar[bool] = contextvars.ContextVar("cut_stream", default=False)
"""Set in the ASGI task of a request whose streamed body was cut on purpose (`stream_cut`)."""


async def refuse(
    exc: ServiceError, retry_after: float, fronts: Sequence[Front], scope: Scope, receive: Receive, send: Send
) -> None:
    """Answer a request refused before its route ran (its key, its fairness key, its body's size): its error answer
    in the body of the front its path belongs to, or a denied handshake; a speech route's refusal is logged and
    counted first."""
    front = front_for(fronts, scope["path"])
    if scope["type"] == "websocket":
        await _deny_websocket(exc, retry_after, front, scope, receive, send)
        return
    _count_refusal(scope, exc)
    await error_response(exc, retry_after, front.error_body)(scope, receive, send)


def _count_refusal(scope: Scope, exc: ServiceError) -> None:
    """Before the answer goes out, so that a client that reads /metrics next finds its refusal counted."""
    route = scope.get("state", {}).get(SPEECH_ROUTE)
    if route is not None:
        connection = HTTPConnection(scope)
        synthesis: SynthesisService = connection.app.state.service.synthesis
        synthesis.rejected(route, exc, connection.client.host if connection.client else None)


async def _deny_websocket(
    exc: ServiceError, retry_after: float, front: Front, scope: Scope, receive: Receive, send: Send
) -> None:
    """Refuse a WebSocket handshake with the error's HTTP answer (status, the front's error body, Retry-After, the
    front's handshake headers) where the server can send one (the ASGI `websocket.http.response` extension, which
    uvicorn has); else with a close, which the client sees as a 403. Logged and counted as `refuse` has it."""
    _count_refusal(scope, exc)
    _DENIED_HANDSHAKE.set(True)
    if "websocket.http.response" in scope.get("extensions", {}):
        extra = front.handshake_headers(exc) if front.handshake_headers is not None else None
        await error_response(exc, retry_after, front.error_body, extra)(scope, receive, send)
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": exc.code})


def stream_cut() -> None:
    """The request's streamed body was cut on purpose (`middleware.CutStreams`, after the failure's own log line):
    uvicorn's ERROR that its response is incomplete is dropped."""
    _CUT_STREAM.set(True)


class _DeniedHandshakes(logging.Filter):
    """Drops uvicorn's ERROR `ASGI callable returned without completing handshake.` for a handshake that
    `_deny_websocket` answered: uvicorn's websockets-sansio protocol (its default) never counts an HTTP answer as the
    handshake's end (uvicorn PR #3138), so it says so for every refusal. A handshake left unanswered still logs it.
    So too `... without completing response.` for a body cut on purpose (`stream_cut`): the cut is how the client
    learns of a failure after its status, and the failure was logged where it happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        on_purpose = _DENIED_HANDSHAKE.get() or _CUT_STREAM.get()
        return not (on_purpose and record.getMessage().startswith("ASGI callable returned without"))


_DENIED_HANDSHAKES = _DeniedHandshakes()


def install_error_handlers(app: FastAPI, retry_after: float, fronts: Sequence[Front]) -> None:
    """Map every error onto its JSON answer, in the body of the front its path belongs to; 429 and 503 always carry
    Retry-After (`retry_after` by default)."""
    logging.getLogger("uvicorn.error").addFilter(_DENIED_HANDSHAKES)  # once, however many apps are made

    def answer(exc: ServiceError, request: HTTPConnection) -> JSONResponse:
        return error_response(exc, retry_after, front_for(fronts, request.url.path).error_body)

    async def on_service_error(connection: HTTPConnection, exc: Exception) -> JSONResponse | None:
        assert isinstance(exc, ServiceError)
        if not isinstance(connection, WebSocket):
            return answer(exc, connection)
        if connection.application_state != WebSocketState.CONNECTING:
            raise exc  # a socket already accepted answers its own errors: one that escapes is a fault
        front = front_for(fronts, connection.url.path)
        await _deny_websocket(exc, retry_after, front, connection.scope, connection.receive, connection.send)
        return None

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        own_body = front_for(fronts, request.url.path).validation_error_body
        if own_body is not None:
            return JSONResponse(own_body(exc.errors()), status_code=422)
        return answer(invalid_fields(exc.errors()), request)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        message = str(exc.detail)
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request.app.router.routes, request.scope))
            message = f"{request.method} is not allowed here; this resource takes {headers['Allow']}"
        response = answer(HttpError(exc.status_code, message), request)
        response.headers.update(headers)
        return response

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        # What went wrong stays in the log: the client learns only that it was the server.
        response = answer(ServiceError("internal server error"), request)
        response.headers.update(request_ids.header(request.scope))
        return response

    # Starlette hands it a Request, or a WebSocket route's WebSocket (whose answer it sends itself): one handler for
    # both, which Starlette's types (one or the other) cannot say.
    app.add_exception_handler(ServiceError, on_service_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
