"""What routes get injected: the service, the request's principal, its speech context; and the route class of the
speech routes, which counts a request whose body does not validate as a refused request of the lifecycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import HTTPConnection

from errors import Forbidden, invalid_fields
from lifecycle.request_context import RequestContext
from lifecycle.service import Service
from web.auth import ANONYMOUS, Identity
from web.connections import CLOSE_CONNECTION


def get_service(connection: HTTPConnection) -> Service:
    return connection.app.state.service


def get_identity(connection: HTTPConnection) -> Identity | None:
    """Who `auth.Authenticate` decided this request is (None on a public path asked without a valid key)."""
    return connection.state.identity


def get_principal(identity: Annotated[Identity | None, Depends(get_identity)]) -> str:
    return identity.principal if identity is not None else ANONYMOUS


def require_admin(identity: Annotated[Identity | None, Depends(get_identity)]) -> None:
    if identity is None or not identity.admin:
        raise Forbidden("this route needs an admin key (POLYTTS_ADMIN_KEYS)", code="admin_key_required")


def disconnect_watch(request: Request) -> Callable[[], Awaitable[None]]:
    """An awaitable factory that returns once the client has gone away (the body is read by then)."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return disconnected


def connection_context(
    connection: HTTPConnection, route: str, *, streaming: bool = False, engine: str | None = None
) -> RequestContext:
    """A speech request's context from its connection (HTTP or WebSocket): its fairness key, its client's address
    and the way to close its connection."""
    return RequestContext(
        route=route,
        principal=get_principal(get_identity(connection)),
        streaming=streaming,
        client=connection.client.host if connection.client else None,
        engine=engine,
        close_connection=connection.scope.get(CLOSE_CONNECTION),
    )


def speech_context(request: Request) -> RequestContext:
    """A whole-file request: its answer is sent once it is complete."""
    context = connection_context(request, request.url.path.strip("/"))
    context.disconnected = disconnect_watch(request)
    return context


def stream_context(context: Annotated[RequestContext, Depends(speech_context)]) -> RequestContext:
    """A streamed request: its audio is played as it arrives, so the scheduler keeps it ahead of its listener."""
    context.streaming = True
    return context


ServiceDep = Annotated[Service, Depends(get_service)]
AdminOnly = Depends(require_admin)
SpeechContext = Annotated[RequestContext, Depends(speech_context)]
StreamContext = Annotated[RequestContext, Depends(stream_context)]


class SpeechRoute(APIRoute):
    """A speech route: a body that does not validate is a refused request, logged and counted like the others."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def counted(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                # The template, not the path: a path per voice (ElevenLabs' routes) would be a label per voice.
                route, client = self.path.strip("/"), request.client.host if request.client else None
                get_service(request).synthesis.rejected(route, invalid_fields(exc.errors()), client)
                raise

        return counted
