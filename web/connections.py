"""A way to close a client's connection at once, for the one case nothing else reaches: a response blocked on a
client that never reads (a graceful close waits for the unsent bytes, which never leave)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import struct

from starlette.types import ASGIApp, Receive, Scope, Send

CLOSE_CONNECTION = "polytts.close_connection"
"""Scope key of a callable that closes the request's connection at once, where the server lets it be reached."""


class ConnectionCloser:
    """Gives each request a way to close its connection at once (`scope[CLOSE_CONNECTION]`): a response blocked
    on a client that never reads cannot be ended any other way, since a graceful close waits for the unsent bytes.
    It must wrap the application as the server calls it: uvicorn's own `send` is a method of the connection's
    protocol, whose transport can abort."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        if scope["type"] in ("http", "websocket") and isinstance(transport, asyncio.Transport):
            scope[CLOSE_CONNECTION] = functools.partial(reset, transport)
        await self.app(scope, receive, send)


def reset(transport: asyncio.Transport) -> None:
    """Close the connection with a reset, dropping what it still holds to send: closed plainly, the kernel would
    go on offering those bytes to a peer that never takes them."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
