"""The contexts of a WebSocket that carries several live requests at once (Cartesia's `tts/websocket`, ElevenLabs'
`multi-stream-input`): each context's text on its way into its own live request (its own job in the fair queue, its
own log line and count), the task that sends its audio back, the bounds on what one socket may hold, and the loop
that serves such a socket (`ContextSocket.run`), which each front fills in with its own messages.

A context's messages go into its live request as they come (web/fronts/shared/live.py `open_session` reads them from
`SocketContext.messages`); ending a context lets what it was sent be spoken to the end, cancelling it stops its work
at once (a barge-in). Its live request is admitted as the context opens, even with no text yet: a context waiting
for text holds a live-session place of its client's address (POLYTTS_MAX_IDLE_LIVE_PER_CLIENT, POLYTTS_MAX_IDLE_LIVE)
as a native live request does, and one past those bounds is refused with its protocol's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine
from typing import Any, ClassVar, Generic, TypeVar

from starlette.websockets import WebSocket, WebSocketDisconnect

from errors import InvalidInput, ServiceError
from text.chunking import is_speakable
from web.connections import CLOSE_CONNECTION
from web.fronts.shared.live import receive_object
from web.http_errors import SPEECH_ROUTE

log = logging.getLogger("polytts.live")

MAX_CONTEXTS = 5
"""Contexts open at once on one socket: a client that never closes its contexts is refused new ones rather than
holding ever more live requests."""
MAX_CLOSED_IDS = 1_000
"""Closed context ids one socket remembers, the most recent (a reused one is refused, `context_closed`): a client
sending ever new ids holds bounded memory."""

First = TypeVar("First")


class TooManyContexts(ServiceError):
    code = "too_many_contexts"


class SocketContext(Generic[First]):
    """One context: its first message (which fixes its voice and format), its text on the way into its live request,
    and the task that serves it."""

    def __init__(self, context_id: str | None, first: First) -> None:
        self.id = context_id
        self.first = first
        # An empty first message opens its live request at once: admitted, and counted against the live-session
        # bounds (per client address and in all, across every socket), whether or not its first message had text.
        self._inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._inbox.put_nowait({})
        self.unflushed = False
        """Speakable text has come since the last flush."""
        self.flushes = 0
        """Flushes asked so far."""
        self.ended = False
        """Its text is complete: what it was sent is being spoken to the end."""
        self.task: asyncio.Task[None] | None = None

    def put(self, text: str | None, flush: bool = False) -> None:
        item: dict[str, Any] = {}
        if text:
            item["text"] = text
            self.unflushed = self.unflushed or is_speakable(text)
        if flush:
            item["flush"] = True
            self.unflushed = False
            self.flushes += 1
        if item and not self.ended:
            self._inbox.put_nowait(item)

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._inbox.put_nowait(None)

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        """Its messages as a live request reads them (`{"text"}`, `{"flush"}`), until it ends."""
        while (item := await self._inbox.get()) is not None:
            yield item


class JsonSocket:
    """An accepted WebSocket spoken to in JSON text frames: its contexts' tasks send one frame at a time, and nothing
    is sent once the client has gone. A send waits while the client does not read (what the node has to send is
    bounded, and so, since the socket's messages are handled one at a time, what it reads); one that waits longer
    than `stall_s` drops the socket: its connection is reset and its contexts cancelled."""

    def __init__(self, websocket: WebSocket, stall_s: float | None = None) -> None:
        self.websocket = websocket
        self.stall_s = stall_s
        self.left: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Done once the client has closed the socket, or a send to it failed: nobody hears its contexts then."""
        self._send_lock = asyncio.Lock()

    @property
    def gone(self) -> bool:
        """The client has closed the socket, or a send to it failed."""
        return self.left.done()

    @gone.setter
    def gone(self, gone: bool) -> None:
        if gone and not self.left.done():
            self.left.set_result(None)

    @property
    def route(self) -> str:
        """The route it came by, as the access log names it (its template), else its path."""
        scope = self.websocket.scope
        return scope.get("state", {}).get(SPEECH_ROUTE) or scope["path"].strip("/")

    async def send(self, payload: dict[str, Any]) -> bool:
        """Whether it was sent (else the client has gone, or it stalled)."""
        return await self._sent(lambda: self.websocket.send_text(json.dumps(payload, separators=(",", ":"))))

    async def send_bytes(self, data: bytes) -> bool:
        """A binary frame (a protocol that sends its audio so), one at a time with the JSON ones."""
        return await self._sent(lambda: self.websocket.send_bytes(data))

    async def _sent(self, send: Callable[[], Awaitable[None]]) -> bool:
        if self.gone:
            return False
        async with self._send_lock:
            if self.gone:
                return False
            try:
                async with asyncio.timeout(self.stall_s):  # not wait_for: on 3.11 it can swallow a cancel
                    await send()
                return True
            except TimeoutError:
                log.info("%s: the client read nothing for %.0f s: socket dropped", self.route, self.stall_s)
                self.gone = True
                if (reset := self.websocket.scope.get(CLOSE_CONNECTION)) is not None:
                    reset()  # a graceful close would wait for the bytes the client never takes
            except (WebSocketDisconnect, RuntimeError):  # the client went away; RuntimeError: a send after it
                self.gone = True
        return False

    async def receive(self) -> dict[str, Any] | None:
        """The client's next JSON object; None once it has closed the socket."""
        received = await receive_object(self.websocket)
        if received is None:
            self.gone = True
        return received

    async def close(self) -> None:
        """Close the socket, unless the client already has."""
        if not self.gone:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await self.websocket.close(1000)


class SocketContexts(Generic[First]):
    """The contexts open on one socket, and the ids of the last MAX_CLOSED_IDS it has closed (such an id is not
    reused on the socket)."""

    def __init__(self, limit: int = MAX_CONTEXTS) -> None:
        self.limit = limit
        self.open: dict[str | None, SocketContext[First]] = {}
        self.closed: dict[str | None, None] = {}
        """In the order they closed (a dict: ordered, and as quick to search as a set)."""

    def close_id(self, context_id: str | None) -> None:
        self.closed.pop(context_id, None)
        self.closed[context_id] = None
        if len(self.closed) > MAX_CLOSED_IDS:
            del self.closed[next(iter(self.closed))]

    def get(self, context_id: str | None) -> SocketContext[First] | None:
        return self.open.get(context_id)

    @property
    def finishing(self) -> bool:
        """Whether a context is speaking the end of its text (the socket is not idle then)."""
        return any(context.ended for context in self.open.values())

    def start(
        self,
        context_id: str | None,
        first: First,
        serve: Callable[[SocketContext[First]], Coroutine[Any, Any, None]],
    ) -> SocketContext[First]:
        """Open a context and start serving it; a closed id or one context too many is refused."""
        if context_id in self.closed:
            raise InvalidInput(f"context {context_id!r} is closed; open another id", code="context_closed")
        if len(self.open) >= self.limit:
            raise TooManyContexts(f"at most {self.limit} contexts are open at once; close one first")
        context = self.open[context_id] = SocketContext(context_id, first)
        context.task = asyncio.create_task(serve(context))
        return context

    def finished(self, context: SocketContext[First]) -> None:
        if self.open.get(context.id) is context:
            del self.open[context.id]
        self.close_id(context.id)

    def cancel(self, context: SocketContext[First]) -> None:
        """Stop a context's work now (nothing more of it is spoken); its place is free at once."""
        self.finished(context)
        if context.task is not None:
            context.task.cancel()
        context.end()

    def tasks(self) -> set[asyncio.Task[None]]:
        """The tasks of the contexts open now, still running."""
        return {context.task for context in self.open.values() if context.task is not None and not context.task.done()}

    def ending(self) -> set[asyncio.Task[None]]:
        """The tasks of the contexts speaking the end of their text."""
        return {context.task for context in self.open.values() if context.ended and context.task is not None}

    async def cancel_all(self) -> None:
        tasks = [context.task for context in self.open.values() if context.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class ContextSocket(JsonSocket, ABC, Generic[First]):
    """A JSON WebSocket carrying contexts: `run` receives the client's messages one at a time, waiting at most
    `idle_timeout()` for each, hands each to `handle`, and at the end cancels every context still open and closes
    the socket. A front says what its messages mean (`handle`) and how it answers what is not a message (`bad_frame`)
    or silence (`idle`)."""

    hears_out_ended: ClassVar[bool] = False
    """Whether contexts whose text is complete are spoken to their end once the client's messages are over, while
    the client is there to hear them; else every context still open is cancelled at once."""

    def __init__(self, websocket: WebSocket, stall_s: float | None = None) -> None:
        super().__init__(websocket, stall_s)
        self.contexts: SocketContexts[First] = SocketContexts()
        self._receiver: asyncio.Future[dict[str, Any] | None] | None = None

    @abstractmethod
    def idle_timeout(self) -> float | None:
        """How long the socket may send nothing now (None: for ever)."""

    def ends_with(self) -> Collection[asyncio.Future[Any]]:
        """Tasks whose end ends the socket, beside the client's messages."""
        return ()

    async def idle(self) -> None:
        """The client sent nothing for `idle_timeout()`: the socket ends."""

    @abstractmethod
    async def bad_frame(self, exc: ServiceError) -> bool:
        """The client sent what is not a JSON object; whether the socket serves on."""

    @abstractmethod
    async def handle(self, raw: dict[str, Any]) -> bool:
        """Apply one message; False when the socket is to end."""

    async def run(self) -> None:
        """Serve the socket until its client's messages are over, it has gone, it was idle too long, or a task it
        ends with has ended; then (`hears_out_ended`) let the ended contexts finish while the client stays; at the
        end, cancel every context still open (their work stops at once: a client gone hears nothing) and close."""
        try:
            while True:
                receiver = self._next_message()
                ends = set(self.ends_with())
                # A context's end wakes the loop too: the idle timeout may apply from then on.
                waits: set[asyncio.Future[Any]] = {receiver, self.left, *ends, *self.contexts.tasks()}
                done, _ = await asyncio.wait(waits, timeout=self.idle_timeout(), return_when="FIRST_COMPLETED")
                if self.gone:  # what the client sent before it went (or stalled) has nobody to answer
                    break
                if not done:
                    await self.idle()
                    break
                if receiver not in done:
                    if done & ends:  # a task the socket ends with has ended
                        break
                    continue
                try:
                    raw = self._taken()
                except ServiceError as exc:
                    if await self.bad_frame(exc):
                        continue
                    break
                if raw is None or not await self.handle(raw):  # None: the client closed the socket
                    break
            if self.hears_out_ended:
                await self._hear_out()
        finally:
            if self._receiver is not None:
                self._receiver.cancel()
            await self.contexts.cancel_all()
            await self.close()

    async def _hear_out(self) -> None:
        """Let the contexts whose text is complete finish speaking while the client is there to hear them: what it
        sends meanwhile is read only to notice that it has gone."""
        while not self.gone and (ending := self.contexts.ending()):
            receiver = self._next_message()
            waits: set[asyncio.Future[Any]] = {receiver, self.left, *ending}
            done, _ = await asyncio.wait(waits, return_when="FIRST_COMPLETED")
            if receiver in done:
                with contextlib.suppress(ServiceError):
                    self._taken()

    def _next_message(self) -> asyncio.Future[dict[str, Any] | None]:
        """The client's next message, read by one receiver at a time (a wait that ends without it keeps it)."""
        if self._receiver is None:
            self._receiver = asyncio.ensure_future(self.receive())
        return self._receiver

    def _taken(self) -> dict[str, Any] | None:
        """The message the receiver got (or what it raised); the next one gets a receiver of its own."""
        assert self._receiver is not None
        receiver, self._receiver = self._receiver, None
        return receiver.result()
