"""ElevenLabs' input-streaming WebSockets on the live lifecycle: `stream-input` (one stream of text per socket) and
`multi-stream-input` (several contexts per socket, each its own live request: its own job in the fair queue, its
own log line and count), both through `web.live_transport.open_session`.

A context's text goes into its live request as it comes (`flush` speaks what is pending); its audio comes back in
the asked `output_format`, base64 in `audio` messages as it is made, each phrase's `alignment` after its audio where
the engine times words, then `isFinal`. `close_context` ends a context: when everything it was sent has been
flushed (Pipecat's end of a turn: flush, then close), that text is spoken first; otherwise (a barge-in) its work
stops at once. A socket that sends nothing for `inactivity_timeout` seconds while no context is finishing is
closed, and so is every context still open when the socket ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from audio.output import Output
from errors import InvalidInput, ServiceError, invalid_fields
from lifecycle.service import Service
from lifecycle.synthesis import RequestContext
from web.dependencies import connection_context
from web.elevenlabs_protocol import (
    SocketMessage,
    output,
    resolve_model,
    segments,
    socket_alignment,
    socket_error,
)
from web.http_errors import SPEECH_ROUTE, deny_websocket
from web.live_transport import open_session, parse_object

log = logging.getLogger("polytts.elevenlabs")

MAX_CONTEXTS = 5
"""Contexts open at once on one socket, as ElevenLabs allows: a client that never closes its contexts is refused
new ones rather than holding ever more live requests."""
DEFAULT_CONTEXT = "default"
"""The context of a `multi-stream-input` message that names none."""


class SocketQuery(BaseModel):
    """The query string of both WebSockets; parameters this node does not use are ignored."""

    model_config = ConfigDict(extra="allow")

    model_id: str | None = None
    output_format: str | None = None
    language_code: str | None = None
    inactivity_timeout: float = Field(20, gt=0, le=180)


class SocketIdle(ServiceError):
    code = "inactivity_timeout"


class TooManyContexts(ServiceError):
    code = "too_many_contexts"
    status = 429


class _Context:
    """One context's text on its way into its live request, and the task that sends its audio back."""

    def __init__(self, context_id: str | None, first: SocketMessage) -> None:
        self.id = context_id
        self.first = first
        self.inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.unflushed = False
        """Text has come since the last flush: a close then is a barge-in."""
        self.ended = False
        """Its text is complete: what it was sent is being spoken to the end."""
        self.task: asyncio.Task[None] | None = None

    def put(self, message: SocketMessage) -> None:
        item: dict[str, Any] = {}
        if message.text:
            item["text"] = message.text
            self.unflushed = self.unflushed or bool(message.text.strip())
        if message.flush:
            item["flush"] = True
            self.unflushed = False
        if item and not self.ended:
            self.inbox.put_nowait(item)

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.inbox.put_nowait(None)

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        while (item := await self.inbox.get()) is not None:
            yield item


class ElevenLabsSocket:
    """One accepted socket: reads the client's messages, opens and ends its contexts, sends their audio."""

    def __init__(
        self,
        websocket: WebSocket,
        service: Service,
        voice_id: str,
        query: SocketQuery,
        audio: Output,
        engine: str | None,
        multi: bool,
    ) -> None:
        self.websocket = websocket
        self.service = service
        self.voice_id = voice_id
        self.query = query
        self.audio = audio
        self.engine = engine
        self.multi = multi
        self.contexts: dict[str | None, _Context] = {}
        self.closed: set[str | None] = set()
        self._send_lock = asyncio.Lock()
        self._gone = False
        scope = websocket.scope
        route = scope.get("state", {}).get(SPEECH_ROUTE) or scope["path"].strip("/")
        self.request = connection_context(websocket, route, streaming=True, engine=engine)

    async def send(self, payload: dict[str, Any]) -> None:
        if self._gone:
            return
        async with self._send_lock:
            try:
                await self.websocket.send_text(json.dumps(payload, separators=(",", ":")))
            except (WebSocketDisconnect, RuntimeError):  # the client went away; RuntimeError: a send after it
                self._gone = True

    async def run(self) -> None:
        receiver: asyncio.Task[dict[str, Any] | None] | None = None
        try:
            while True:
                receiver = receiver or asyncio.ensure_future(self._receive())
                single = self.contexts.get(None)
                waits: set[asyncio.Future[Any]] = {receiver}
                if single is not None and single.task is not None:
                    waits.add(single.task)
                finishing = any(context.ended for context in self.contexts.values())
                done, _ = await asyncio.wait(
                    waits, timeout=None if finishing else self.query.inactivity_timeout, return_when="FIRST_COMPLETED"
                )
                if not done:
                    idle = f"no message for {self.query.inactivity_timeout:g} s (inactivity_timeout)"
                    await self.send(socket_error(SocketIdle(idle), None))
                    break
                if receiver not in done:  # stream-input's one stream is over
                    break
                try:
                    raw = receiver.result()
                except ServiceError as exc:
                    await self.send(socket_error(exc, None))
                    break
                finally:
                    receiver = None
                if raw is None:  # the client closed the socket
                    self._gone = True
                    break
                if not await self._handle(raw):
                    break
            await self._wait_ended()
        finally:
            if receiver is not None:
                receiver.cancel()
            await self._cancel_all()
            if not self._gone:
                with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                    await self.websocket.close(1000)

    async def _receive(self) -> dict[str, Any] | None:
        received = await self.websocket.receive()
        if received["type"] == "websocket.disconnect":
            return None
        return parse_object(received.get("text") or received.get("bytes") or b"")

    async def _handle(self, raw: dict[str, Any]) -> bool:
        """Apply one message; False when the socket is to end (its text is over)."""
        try:
            message = SocketMessage.model_validate(raw)
        except ValidationError as exc:
            await self.send(socket_error(invalid_fields(exc.errors(), "message: "), raw.get("context_id")))
            return True
        context_id = (message.context_id or DEFAULT_CONTEXT) if self.multi else None
        if message.close_socket:
            for open_context in list(self.contexts.values()):
                self._close(open_context)
            return False
        context: _Context | None = self.contexts.get(context_id)
        if message.close_context and self.multi:
            if context is not None:
                self._close(context)
            return True
        if context is None:
            if context_id in self.closed:
                error = InvalidInput(f"context {context_id!r} is closed; open another id", code="context_closed")
                await self.send(socket_error(error, context_id))
                return True
            if not message.text and not message.flush:  # a keep-alive, for no context yet
                return True
            if len(self.contexts) >= MAX_CONTEXTS:
                await self.send(
                    socket_error(
                        TooManyContexts(f"at most {MAX_CONTEXTS} contexts are open at once; close one first"),
                        context_id,
                    )
                )
                return True
            context = self.contexts[context_id] = _Context(context_id, message)
            context.task = asyncio.create_task(self._serve(context))
        if not self.multi and message.text == "" and not message.flush:  # stream-input's end of text
            context.end()
            return True
        context.put(message)
        return True

    def _close(self, context: _Context) -> None:
        if context.unflushed and context.task is not None:
            context.task.cancel()  # a barge-in: its work stops now
        context.end()

    async def _serve(self, context: _Context) -> None:
        """The context's live request: open it, send its audio and alignment, then `isFinal`."""
        settings = context.first.voice_settings
        query = {"voice_id": self.voice_id}
        if self.query.language_code:
            query["language"] = self.query.language_code
        if settings is not None and settings.speed is not None and settings.speed != 1.0:
            query["speed"] = str(settings.speed)
        session = None
        try:
            session = await open_session(
                self.service.synthesis, self.request_for(), query, context.messages(), timed=None
            )
            first = True
            async for segment in segments(session.speech, self.audio, hold=False):
                found = socket_alignment(segment.words, segment.start, segment.end, lead_space=not first)
                first = first and not segment.words
                message: dict[str, Any] = {
                    "audio": base64.b64encode(segment.audio).decode() if segment.audio else None,
                    "isFinal": None,
                    "normalizedAlignment": found,
                    "alignment": found,
                }
                await self.send(self._tagged(message, context))
        except ServiceError as exc:
            await self.send(socket_error((session.failure if session else None) or exc, context.id))
        finally:
            if session is not None:
                await session.close()
            self.contexts.pop(context.id, None)
            self.closed.add(context.id)
            await self.send(self._tagged({"isFinal": True}, context))

    def request_for(self) -> RequestContext:
        """Each context its own request (its own timings and log line), with the socket's who and where."""
        return dataclasses.replace(self.request)

    def _tagged(self, message: dict[str, Any], context: _Context) -> dict[str, Any]:
        return {**message, "contextId": context.id} if self.multi else message

    async def _wait_ended(self) -> None:
        """Let the contexts whose text is complete finish speaking; the others end with the socket."""
        tasks = [context.task for context in self.contexts.values() if context.ended and context.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _cancel_all(self) -> None:
        tasks = [context.task for context in self.contexts.values() if context.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def serve_socket(websocket: WebSocket, voice_id: str, service: Service, multi: bool) -> None:
    """Refuse the handshake with an HTTP error (ElevenLabs' error shape) when the node drains or the query or the
    voice is wrong; otherwise accept it and serve the socket."""
    try:
        service.synthesis.check_open()
        try:
            query = SocketQuery.model_validate(dict(websocket.query_params))
        except ValidationError as exc:
            raise invalid_fields(exc.errors(), "query: ") from None
        audio = output(query.output_format)
        engine = resolve_model(query.model_id, service.pool.engines)
        await service.catalog.resolve(voice_id)
    except ServiceError as exc:
        await deny_websocket(
            exc, service.settings.retry_after_seconds, websocket.scope, websocket.receive, websocket.send
        )
        return
    await websocket.accept()
    await ElevenLabsSocket(websocket, service, voice_id, query, audio, engine, multi).run()
