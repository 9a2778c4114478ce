"""ElevenLabs' input-streaming WebSockets on the live lifecycle: `stream-input` (one stream of text per socket) and
`multi-stream-input` (several contexts per socket, each its own live request: its own job in the fair queue, its
own log line and count), both through `web.fronts.shared.live.open_session`.

A context's text goes into its live request as it comes (`flush` speaks what is pending), cut into phrases by its
`generation_config.chunk_length_schedule` where it gives one; its audio comes back in the asked `output_format`,
base64 in `audio` messages as it is made, each phrase's `alignment` after its audio where the engine times words,
then `isFinal`. `close_context` ends a context: when everything it was sent has been flushed (Pipecat's end of a
turn: flush, then close), that text is spoken first; otherwise (a barge-in), or when the context was closed already,
its work stops at once. A socket that sends nothing for `inactivity_timeout` seconds while no context is finishing
is closed, and so is every context still open when the socket ends. What was flushed is spoken only while the
client is there to hear it: once it has gone, every context's work stops.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket

from audio.output import Output
from errors import InvalidInput, ServiceError, invalid_fields
from lifecycle.request_context import RequestContext
from lifecycle.service import Service
from text.chunking import is_speakable
from web.dependencies import connection_context
from web.fronts.elevenlabs.dictionaries import locator_lexicons
from web.fronts.elevenlabs.protocol import (
    SocketMessage,
    output,
    resolve_model,
    segments,
    socket_alignment,
    socket_error,
)
from web.fronts.shared.contexts import ContextSocket, SocketContext
from web.fronts.shared.live import open_session

DEFAULT_CONTEXT = "default"
"""The context of a `multi-stream-input` message that names none."""


class SocketQuery(BaseModel):
    """The query string of both WebSockets; parameters this node does not use are ignored."""

    model_config = ConfigDict(extra="allow")

    model_id: str | None = None
    output_format: str | None = None
    language_code: str | None = None
    inactivity_timeout: float = Field(20, gt=0, le=180)
    auto_mode: bool = Field(
        False,
        description="Each text message is a whole phrase (Pipecat and LiveKit send sentences so): it is spoken at "
        "once, as if flushed, and it ends a word even without a trailing space.",
    )
    enable_ssml_parsing: bool = Field(
        False,
        description="The text is SSML without a <speak> of its own: <break> and <phoneme> (and the other elements "
        "the node reads), a tag possibly split across messages.",
    )
    sync_alignment: bool = Field(
        False,
        description="Alignment times on the context's clock (from the start of its audio), where LiveKit's plugin, "
        "which asks for this, places them; otherwise from the start of the audio each message's alignment covers, "
        "as ElevenLabs' reference has them and Pipecat adds them up.",
    )


class SocketIdle(ServiceError):
    code = "inactivity_timeout"


Context = SocketContext[SocketMessage]


class ElevenLabsSocket(ContextSocket[SocketMessage]):
    """One accepted socket: reads the client's messages, opens and ends its contexts, sends their audio."""

    hears_out_ended = True  # `close_socket`: what was sent and flushed is still spoken

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
        super().__init__(websocket, service.settings.reader_idle_limit_s)
        self.service = service
        self.voice_id = voice_id
        self.query = query
        self.audio = audio
        self.engine = engine
        self.multi = multi
        self.unflushed: set[str | None] = set()
        """Contexts sent speakable text since their last `flush`: closing one of them is a barge-in."""
        self.request = connection_context(websocket, self.route, streaming=True, engine=engine)

    def idle_timeout(self) -> float | None:
        return None if self.contexts.finishing else self.query.inactivity_timeout

    def ends_with(self) -> Collection[asyncio.Future[Any]]:
        single = self.contexts.get(None)  # stream-input's one stream: the socket ends with it
        return {single.task} if single is not None and single.task is not None else set()

    async def idle(self) -> None:
        idle = f"no message for {self.query.inactivity_timeout:g} s (inactivity_timeout)"
        await self.send(socket_error(SocketIdle(idle), None))

    async def bad_frame(self, exc: ServiceError) -> bool:
        await self.send(socket_error(exc, None))
        return False

    async def handle(self, raw: dict[str, Any]) -> bool:
        """Apply one message; False when the socket is to end (its text is over)."""
        try:
            message = SocketMessage.model_validate(raw)
        except ValidationError as exc:
            await self.send(socket_error(invalid_fields(exc.errors(), "message: "), raw.get("context_id")))
            return True
        context_id = (message.context_id or DEFAULT_CONTEXT) if self.multi else None
        if message.close_socket:
            for open_context in list(self.contexts.open.values()):
                self._close(open_context)
            return False
        context = self.contexts.get(context_id)
        if message.close_context and self.multi:
            if context is not None and context.ended:
                self.contexts.cancel(context)  # closed again (a barge-in after the end of a turn): it stops now
            elif context is not None:
                self._close(context)
            return True
        if context is None:
            if not message.text and not message.flush:
                return True  # a keep-alive, for no open context (Pipecat sends them after closing one too)
            try:
                context = self.contexts.start(context_id, message, self._serve)
            except ServiceError as exc:  # a closed id, or one context too many
                await self.send(socket_error(exc, context_id))
                return True
        elif message.pronunciation_dictionary_locators is not None:
            # Its live request was planned with the first message's dictionaries: a later change cannot be honoured.
            refused = InvalidInput(
                "pronunciation_dictionary_locators are read from a context's first message only", code="invalid_message"
            )
            await self.send(socket_error(refused, context_id))
            return True
        if not self.multi and message.text == "" and not message.flush:  # stream-input's end of text
            context.end()
            return True
        text, flush = message.text, message.flush
        speakable = text is not None and is_speakable(text)
        # In auto mode every phrase is spoken as if flushed, so only a flush with no text of its own says that the
        # text is all sent (LiveKit flushes each sentence, then ends with an empty one; Pipecat flushes at the end).
        if flush and not (speakable and self.query.auto_mode):
            self.unflushed.discard(context_id)
        elif speakable:
            self.unflushed.add(context_id)
        if text is not None and speakable and self.query.auto_mode:
            # A whole phrase: spoken now, and its last word ends with it.
            text, flush = text if text[-1].isspace() else text + " ", True
        context.put(text, flush)
        return True

    def _close(self, context: Context) -> None:
        if context.id in self.unflushed:
            self.contexts.cancel(context)  # a barge-in: its work stops now
        else:
            context.end()

    async def _serve(self, context: Context) -> None:
        """The context's live request: open it, send its audio and alignment, then `isFinal`."""
        first = context.first
        query = {"voice_id": self.voice_id}
        if self.query.language_code:
            query["language"] = self.query.language_code
        if first.voice_settings is not None and first.voice_settings.speed not in (None, 1.0):
            query["speed"] = str(first.voice_settings.speed)
        phrase_chars = first.generation_config.phrase_chars() if first.generation_config else None
        session = None
        try:
            lexicons = await locator_lexicons(self.service, first.pronunciation_dictionary_locators)
            if lexicons:
                query["lexicons"] = ",".join(lexicons)
            session = await open_session(
                self.service.synthesis,
                self.request_for(),
                query,
                context.messages(),
                None,
                phrase_chars,
                True if self.query.enable_ssml_parsing else None,
            )
            async for segment in segments(session.speech, self.audio, hold=False):
                origin = 0.0 if self.query.sync_alignment else segment.start
                found = socket_alignment(segment.words, segment.start, segment.end, origin)
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
            # Open until its `isFinal` is out: `close_socket` hears out the open contexts, this message too.
            await self.send(self._tagged({"isFinal": True}, context))
            self.contexts.finished(context)
            self.unflushed.discard(context.id)

    def request_for(self) -> RequestContext:
        """Each context its own request (its own timings and log line), with the socket's who and where."""
        return dataclasses.replace(self.request)

    def _tagged(self, message: dict[str, Any], context: Context) -> dict[str, Any]:
        return {**message, "contextId": context.id} if self.multi else message


async def serve_socket(websocket: WebSocket, voice_id: str, service: Service, multi: bool) -> None:
    """Refuse the handshake (raise: web.http_errors answers it in ElevenLabs' error shape) when the node drains or
    the query or the voice is wrong; otherwise accept it and serve the socket."""
    service.synthesis.check_open()
    try:
        query = SocketQuery.model_validate(dict(websocket.query_params))
    except ValidationError as exc:
        raise invalid_fields(exc.errors(), "query: ") from None
    audio = output(query.output_format)
    engine = resolve_model(query.model_id, service.pool.engines)
    await service.catalog.resolve(voice_id)
    await websocket.accept()
    await ElevenLabsSocket(websocket, service, voice_id, query, audio, engine, multi).run()
