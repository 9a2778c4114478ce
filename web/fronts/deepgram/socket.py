"""Deepgram's WebSocket `.../v1/speak` on the live lifecycle: one voice and one audio format per socket (its query),
its text spoken one live request at a time through `web.fronts.shared.live.open_session`.

The socket starts with `Metadata`. `Speak` appends text to the live request under way (opening one when none is);
the audio comes back as binary frames, raw in the socket's `encoding` and `sample_rate`. `Flush` ends the live
request's text: what is pending is spoken and, once all its audio is out, `Flushed` answers with its `sequence_id`
(0, 1, ... on the socket); the next `Speak` opens the next live request (its own log line), whose audio follows. `Clear` is a barge-in: the work under way and queued stops, nothing more of
it is sent, then `Cleared`. `Close` ends the socket at once. A message the node does not take is answered by a
`Warning`, and a live request that fails by an `Error`; the socket serves on either way. Where the query asks for
`word_timestamps` (this node's own), each phrase's words follow its audio as a `Words` message. A socket with nothing to
speak that sends nothing for SOCKET_IDLE_S is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket

from audio.output import Output
from audio.word_timings import Words
from errors import ServiceError, invalid_fields
from lifecycle.service import Service
from web.dependencies import connection_context
from web.fronts.deepgram.protocol import (
    SocketMessage,
    SpeakQuery,
    metadata,
    model_headers,
    model_voice,
    socket_error,
    warning,
)
from web.fronts.shared.contexts import ContextSocket, SocketContext
from web.fronts.shared.live import LiveIdle, open_session

SOCKET_IDLE_S = 300.0
"""How long a socket with nothing to speak may send nothing."""

Turn = SocketContext[SocketMessage]


class DeepgramSocket(ContextSocket[SocketMessage]):
    """One accepted socket: reads the client's messages into its live requests, one after another, and sends their
    audio. A client that closes the socket (or sends `Close`) leaves nobody to hear them: they are cancelled."""

    def __init__(self, websocket: WebSocket, service: Service, query: SpeakQuery, audio: Output, voice: str) -> None:
        super().__init__(websocket, service.settings.reader_idle_limit_s)
        self.service = service
        self.query = query
        self.audio = audio
        self.voice = voice
        self.request = connection_context(websocket, self.route, streaming=True)
        self.current: str | None = None
        """The id of the live request text goes to."""
        self.turns = 0
        """Live requests opened: each one's id (ids are never reused on a socket)."""
        self.waiting: dict[str | None, deque[int]] = {}
        """Each live request's flushes not yet answered: their sequence ids."""
        self.flushes = 0
        self.clears = 0

    def idle_timeout(self) -> float | None:
        return None if self.contexts.open else SOCKET_IDLE_S

    async def bad_frame(self, exc: ServiceError) -> bool:
        await self.send(warning(exc.code, exc.message))  # not a JSON object: said, and the socket serves on
        return True

    async def handle(self, raw: dict[str, Any]) -> bool:
        try:
            message = SocketMessage.model_validate(raw)
        except ValidationError as exc:
            wrong = invalid_fields(exc.errors(), "message: ")
            await self.send(warning(wrong.code, wrong.message))
            return True
        if message.type == "Close":
            return False
        if message.type == "Clear":
            await self._clear()
        elif message.type == "Speak":
            await self._speak(message)
        else:
            await self._flush()
        return True

    async def _speak(self, message: SocketMessage) -> None:
        if not message.text:
            await self.send(warning("empty_text", "a Speak message with no text is ignored"))
            return
        turn = self.contexts.get(self.current)
        if turn is None or turn.ended:
            previous = [other.task for other in self.contexts.open.values() if other.task is not None]
            self.turns += 1
            self.current = str(self.turns)
            self.waiting[self.current] = deque()
            try:
                turn = self.contexts.start(self.current, message, lambda turn: self._serve(turn, previous))
            except ServiceError as exc:  # live requests still finishing, one too many
                await self.send(warning(exc.code, exc.message))
                return
        turn.put(message.text)

    async def _flush(self) -> None:
        """The live request under way ends its text here: what is pending is spoken, and `Flushed` follows its last
        audio. Text after it opens the next live request, whose audio follows."""
        sequence_id, self.flushes = self.flushes, self.flushes + 1
        turn = self.contexts.get(self.current)
        if turn is None:  # nothing is being spoken: this flush is done already
            await self.send({"type": "Flushed", "sequence_id": sequence_id})
            return
        self.waiting[turn.id].append(sequence_id)
        turn.end()

    async def _clear(self) -> None:
        """Stop every live request's work now, then say so: no audio of theirs comes after `Cleared`."""
        turns = list(self.contexts.open.values())
        for turn in turns:
            self.contexts.cancel(turn)
        await asyncio.gather(*(turn.task for turn in turns if turn.task is not None), return_exceptions=True)
        self.waiting.clear()
        self.current = None
        sequence_id, self.clears = self.clears, self.clears + 1
        await self.send({"type": "Cleared", "sequence_id": sequence_id})

    async def _serve(self, turn: Turn, previous: list[asyncio.Task[None]]) -> None:
        """One live request: after the one before it has sent its audio, its own audio as binary frames (and its
        words, where the query asks), then its flushes answered."""
        waiting = self.waiting[turn.id]
        query = {"voice_id": self.voice}
        if (rate := self.query.speaking_rate()) is not None:
            query["speed"] = str(rate)
        session = None
        try:
            try:
                if previous:
                    await asyncio.wait(previous)
                request = dataclasses.replace(self.request)  # each live request its own timings and log line
                timed = True if self.query.word_timestamps else None
                session = await open_session(self.service.synthesis, request, query, turn.messages(), timed=timed)
                async with contextlib.aclosing(session.speech.encoded_events(self.audio)) as events:
                    async for item in events:
                        if isinstance(item, Words):
                            if item.words and self.query.word_timestamps:
                                await self.send({"type": "Words", "words": [word.public() for word in item.words]})
                        elif item:
                            await self.send_bytes(item)
            except ServiceError as exc:
                failure = (session.failure if session else None) or exc
                if not isinstance(failure, LiveIdle):  # the client's silence ends a live request, not the socket
                    await self.send(socket_error(failure))
            # All of its audio is out, the encoder's tail (what the resampler held) included, or all there will be:
            # its flushes are done (a client waits for them to end its turn). A cleared one's never are.
            while waiting:
                await self.send({"type": "Flushed", "sequence_id": waiting.popleft()})
        finally:
            if session is not None:
                await session.close()
            self.contexts.finished(turn)


async def serve_socket(websocket: WebSocket, service: Service) -> None:
    """Refuse the handshake (raise: web.http_errors answers it in Deepgram's error shape, with its headers) when the
    node drains or the query, the model or its voice is wrong; otherwise accept it, say `Metadata` and serve the
    socket."""
    service.synthesis.check_open()
    try:
        query = SpeakQuery.model_validate(dict(websocket.query_params))
    except ValidationError as exc:
        raise invalid_fields(exc.errors(), "query: ") from None
    audio = query.output(socket=True)
    voice = model_voice(query.model)
    await service.catalog.resolve(voice)
    headers = model_headers(query.model_name())
    await websocket.accept(headers=[(name.encode(), value.encode()) for name, value in headers.items()])
    socket = DeepgramSocket(websocket, service, query, audio, voice)
    await socket.send(metadata(query.model_name()))
    await socket.run()
