"""Cartesia's WebSocket `.../tts/websocket` on the live lifecycle: several contexts per socket, each its own live
request (its own job in the fair queue, its own log line and count), through `web.fronts.shared.live.open_session`.

A message names its context. Its `transcript` goes into that context's live request as it comes; `continue: false`
(the default) ends the context's text: the rest is spoken, then `done`. `flush: true` speaks what is pending and,
once that audio is out, is answered by `flush_done` with its `flush_id` (the chunks before it carry the same id).
`cancel: true` stops the context's work at once, and nothing more of it is sent (a barge-in). Audio comes as `chunk`
events (base64, in the context's `output_format`), word timings as `timestamps` events after their audio where
`add_timestamps` asked for them. A socket with no context open that sends nothing for SOCKET_IDLE_S is closed, as
Cartesia closes one after five minutes. Every context is a live request from its first message on, an empty
transcript too (web/fronts/shared/contexts.py): it holds a live-session place of its client's address while it waits
for text, and one past the bounds is an `error` event (`live_sessions_full`). A socket holds at most MAX_CONTEXTS
contexts (each with its answer to send) and one error at a time, so a client that never reads holds bounded memory,
and is dropped after POLYTTS_READER_IDLE_LIMIT_S (`JsonSocket`).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import logging
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket

from audio.output import Output
from audio.word_timings import Words
from errors import InvalidInput, ServiceError, invalid_fields
from lifecycle.service import Service
from text.chunking import is_speakable
from text.live_text import LiveText
from web.dependencies import connection_context
from web.fronts.cartesia.dictionaries import dict_lexicons
from web.fronts.cartesia.protocol import (
    SocketMessage,
    StepClock,
    event_error,
    resolve_model,
    word_timestamps,
)
from web.fronts.shared.contexts import ContextSocket, SocketContext
from web.fronts.shared.live import open_session

log = logging.getLogger("polytts.live")

SOCKET_IDLE_S = 300.0
"""How long a socket with no context open may send nothing."""
_OK = {"status_code": 200}


@dataclasses.dataclass
class _Flushes:
    """How far a context has got: the last character of its text, steps spoken, and flushes answered."""

    tail: str = ""
    spoken: int = 0
    answered: int = 0


_SENTENCE_ENDS = frozenset(".!?")


def joined(tail: str, transcript: str) -> str:
    """A transcript as it continues a context's text. Cartesia joins transcripts verbatim, but Pipecat sends an
    agent's sentences without the space between them: a sentence's end right before a capital gets its space, or
    "dog.It" would be one word and the two sentences one phrase (a language model's tokens "3", ".", "5" keep
    theirs)."""
    if tail in _SENTENCE_ENDS and transcript[:1].isupper():
        return " " + transcript
    return transcript


class CartesiaSocket(ContextSocket[SocketMessage]):
    """One accepted socket: reads the client's messages, opens, feeds and cancels its contexts, sends their audio.
    A client that closes the socket leaves nobody to hear its contexts: they are cancelled."""

    def __init__(self, websocket: WebSocket, service: Service) -> None:
        super().__init__(websocket, service.settings.reader_idle_limit_s)
        self.service = service
        self.flushes: dict[str | None, _Flushes] = {}
        self.request = connection_context(websocket, self.route, streaming=True)

    def idle_timeout(self) -> float | None:
        return None if self.contexts.open else SOCKET_IDLE_S

    async def bad_frame(self, exc: ServiceError) -> bool:
        await self.send(event_error(exc, None))  # not a JSON object: said, and the socket serves on
        return True

    async def handle(self, raw: dict[str, Any]) -> bool:
        await self._apply(raw)
        return True  # a context's mistake is an `error` event of that context: the socket serves on

    async def _apply(self, raw: dict[str, Any]) -> None:
        named = raw.get("context_id")
        context_id = named if isinstance(named, str) else None
        try:
            message = SocketMessage.model_validate(raw)
            if message.context_id is None:
                raise InvalidInput("every message names its context_id", code="invalid_message")
            context = self.contexts.get(message.context_id)
            if message.cancel:
                if context is not None:
                    self.contexts.cancel(context)
                return
            if context is None:
                context = await self._open(message)
        except ValidationError as exc:
            await self.send(event_error(invalid_fields(exc.errors(), "message: "), context_id))
            return
        except ServiceError as exc:
            await self.send(event_error(exc, context_id))
            return
        if context.ended:
            ended = InvalidInput(f"context {context.id!r} has ended (continue: false)", code="context_closed")
            await self.send(event_error(ended, context.id))
            return
        progress = self.flushes[context.id]
        transcript = joined(progress.tail, message.transcript)
        progress.tail = (progress.tail + transcript)[-1:]
        said = context.unflushed or is_speakable(transcript)
        context.put(transcript, message.flush)
        if message.flush and not said and progress.answered == context.flushes - 1:
            # Nothing was said since the last flush, whose audio is out: this one is done already.
            await self._answer_flush(context, progress)
        if not message.continue_:
            context.end()

    async def _open(self, message: SocketMessage) -> SocketContext[SocketMessage]:
        """Start a context from its first message, once its voice, format and model are known to be answered. One
        with nothing to say is a live request like any other (admitted within the live-session bounds, its own log
        line), answered `done` once it is over."""
        if message.voice is None or message.output_format is None:
            raise InvalidInput("a context's first message names its voice and output_format", code="invalid_message")
        message.voice_id()
        message.output_format.output(("raw",))
        resolve_model(message.model_id, self.service.pool.engines)
        context = self.contexts.start(message.context_id, message, self._serve)
        self.flushes[context.id] = _Flushes()
        return context

    async def _serve(self, context: SocketContext[SocketMessage]) -> None:
        """The context's live request: its audio as `chunk` events, its words as `timestamps`, then `done`."""
        first = context.first
        assert first.output_format is not None
        audio: Output = first.output_format.output(("raw",))
        query = {"voice_id": first.voice_id()}
        if language := first.spoken_language():
            query["language"] = language
        if (rate := first.speaking_rate()) is not None:
            query["speed"] = str(rate)
        request = dataclasses.replace(self.request, engine=resolve_model(first.model_id, self.service.pool.engines))
        progress = self.flushes[context.id]
        clock = StepClock()
        session = None
        try:
            if lexicons := await dict_lexicons(self.service, first.pronunciation_dict_id):
                query["lexicons"] = ",".join(lexicons)
            timed = True if first.add_timestamps else None
            # Cartesia's tags (<break>, <spell>, <speed>) are read in every transcript, as Cartesia reads them.
            session = await open_session(
                self.service.synthesis, request, query, context.messages(), timed=timed, ssml=True
            )
            async with contextlib.aclosing(session.speech.encoded_events(audio)) as events:
                async for item in events:
                    if isinstance(item, Words):
                        progress.spoken += 1
                        if item.words and first.add_timestamps:
                            await self.send(
                                self._tagged(context, {"type": "timestamps", "done": False}, progress)
                                | {"word_timestamps": word_timestamps(item.words)}
                            )
                        await self._answer_flushes(context, session.text, progress)
                    elif item:
                        chunk = {"type": "chunk", "done": False, "data": base64.b64encode(item).decode()}
                        await self.send(self._tagged(context, chunk, progress) | {"step_time": clock.step_ms()})
            while progress.answered < context.flushes:  # everything is spoken: every flush is done
                await self._answer_flush(context, progress)
            await self.send({"type": "done", "context_id": context.id, "done": True, **_OK})
        except ServiceError as exc:
            await self.send(event_error((session.failure if session else None) or exc, context.id))
        finally:
            if session is not None:
                await session.close()
            self.contexts.finished(context)
            if self.flushes.get(context.id) is progress:
                del self.flushes[context.id]

    @staticmethod
    def _tagged(context: SocketContext[SocketMessage], message: dict[str, Any], progress: _Flushes) -> dict[str, Any]:
        return {**message, "context_id": context.id, "flush_id": progress.answered + 1, **_OK}

    async def _answer_flushes(self, context: SocketContext[SocketMessage], text: LiveText, progress: _Flushes) -> None:
        """Answer each flush whose phrases are all spoken now."""
        marks, spoken = text.flush_marks, text.phrases_in(progress.spoken)
        while progress.answered < len(marks) and marks[progress.answered] <= spoken:
            await self._answer_flush(context, progress)

    async def _answer_flush(self, context: SocketContext[SocketMessage], progress: _Flushes) -> None:
        progress.answered += 1
        flush = {"type": "flush_done", "done": False, "flush_done": True, "flush_id": progress.answered}
        await self.send({**flush, "context_id": context.id, **_OK})


async def serve_socket(websocket: WebSocket, service: Service) -> None:
    """Refuse the handshake (raise: web.http_errors answers it in Cartesia's error shape) when the node drains;
    otherwise accept it and serve the socket (a context's own mistakes are `error` events of that context)."""
    service.synthesis.check_open()
    await websocket.accept()
    await CartesiaSocket(websocket, service).run()
