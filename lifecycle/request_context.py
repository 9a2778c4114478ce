"""Who asks for a synthesis, through which route, and how to tell that they went away.

The web layer makes a `RequestContext` per speech request (web/dependencies.py); the lifecycle reads it to count the
request against its fairness key and its client's address, to name it in its log line, and to stop work the client
no longer waits for (`until_disconnected`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from errors import ClientDisconnected

T = TypeVar("T")
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
"""The id of the request this task serves (its `X-Request-Id`), set by the web layer's middleware before anything
else runs: a request's log line carries it however deep the line is written."""


@dataclass
class RequestContext:
    """Who asks, through which route, and how to tell that they went away."""

    route: str
    principal: str = "anonymous"
    """The fairness key the request counts against."""
    streaming: bool = False
    """The answer is played as it arrives: the scheduler keeps it ahead of its listener (a playback clock)."""
    client: str | None = None
    """The client's address: one address holds at most a share of the admission slots."""
    engine: str | None = None
    """The engine the request asked for by name (an OpenAI `model`); its voice must belong to it."""
    disconnected: Callable[[], Awaitable[None]] | None = None
    """Returns once the client has gone away; work the request waits for is then cancelled."""
    close_connection: Callable[[], None] | None = None
    """Closes the client's connection at once, where the server lets it (a reader that never reads is let go so)."""
    background: bool = False
    """A piece of a background job (jobs/): its steps run only when no other request needs the GPU thread, with no
    deadline, and its audio goes to the job's files, not the caches."""
    request_id: str | None = field(default_factory=REQUEST_ID.get)
    """The request's `X-Request-Id`, in its log line (the request being served where the context is made)."""


async def until_disconnected(ctx: RequestContext, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client goes away first (then raise ClientDisconnected)."""
    task = asyncio.ensure_future(work)
    if ctx.disconnected is None:
        return await task
    watcher = asyncio.ensure_future(ctx.disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientDisconnected(f"client disconnected from {ctx.route} before its audio was ready")
    return task.result()
