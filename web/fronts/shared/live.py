"""Text streamed in, speech streamed out: a live request, whose text arrives while a language model writes it, as
every front's live routes and sockets open it (`open_session`).

The client sends messages (`{"text": ...}` appends, `{"flush": true}` speaks what is pending), over a WebSocket or
as the NDJSON body of a full-duplex HTTP request (web/fronts/native/live.py); the text goes into the request's `LiveText` (text/live_text.py),
which cuts it into phrases, each one step of the request's job on the GPU thread, in order. A job waiting for text
is not ready: it holds no step of the GPU thread and no admission place (`gpu.fairness`). A partial phrase pending
for POLYTTS_LIVE_FLUSH_MS is spoken anyway; a request that sends no speakable text for POLYTTS_LIVE_IDLE_TIMEOUT_S
(keep-alive messages do not count) ends with `live_idle_timeout`, and a request failing after its audio started
is cut where the client sees it: an aborted body, or an `error` event on the WebSocket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette.types import Receive
from starlette.websockets import WebSocket

from errors import ClientDisconnected, InvalidInput, PayloadTooLarge, ServiceError, invalid_fields
from lifecycle.request_context import RequestContext
from lifecycle.speech import Speech
from lifecycle.synthesis import SynthesisService
from text.chunking import is_speakable
from text.live_text import LiveText
from web.fronts.shared.requests import LiveMessage, LiveOptions
from web.fronts.shared.speaking import counted_refusal

log = logging.getLogger("polytts.live")


class LiveIdle(ServiceError):
    code = "live_idle_timeout"


def message(data: dict[str, Any]) -> LiveMessage:
    """One message, validated; a 422 that says what is wrong otherwise."""
    try:
        return LiveMessage.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(
            f'a live message must be {{"text": ...}} or {{"flush": true}}: {exc}'[:300], code="invalid_message"
        ) from None


def options(query: dict[str, str], first: dict[str, Any] | None) -> LiveOptions:
    """The request's options from its query string, or from its first message (which then carries no text)."""
    given = {**query, **(first or {})}
    try:
        return LiveOptions.model_validate(given)
    except ValidationError as exc:
        raise invalid_fields(exc.errors(), "live request options: ") from None


_MESSAGE_KEYS = frozenset(LiveMessage.model_fields)


@dataclass
class LiveSession:
    """One live request under way: its speech, its text, and the tasks that read the client's messages into it."""

    speech: Speech
    text: LiveText
    options: LiveOptions
    feeder: asyncio.Task[None]
    reader: asyncio.Task[Exception | None]

    async def cancel_when_gone(self, receive: Receive) -> None:
        """Once the request body has been read, cancel the synthesis when the client goes away (nobody else reads
        the connection by then)."""
        await asyncio.wait([self.reader])
        while (await receive())["type"] != "http.disconnect":
            pass
        if self.speech.job is not None:
            self.speech.job.cancel("client disconnected")

    @property
    def failure(self) -> ServiceError | None:
        """Why the messages stopped early (a bad message, the idle limit, too much text), if they did."""
        if self.feeder.done() and not self.feeder.cancelled():
            error = self.feeder.exception()
            if isinstance(error, ServiceError):
                return error
        return None

    async def close(self) -> None:
        for task in (self.feeder, self.reader):
            task.cancel()
        await asyncio.gather(self.feeder, self.reader, return_exceptions=True)


async def open_session(
    synthesis: SynthesisService,
    ctx: RequestContext,
    query: dict[str, str],
    raw: AsyncIterator[dict[str, Any]],
    timed: bool | None,
    phrase_chars: tuple[int, int] | None = None,
    ssml: bool | None = None,
) -> LiveSession:
    """Read the first message (which may carry the options instead of the query string), plan and admit the request,
    and start feeding its text (cut into phrases by the engine's caps, or `phrase_chars`: see `speak_live`; read as
    SSML as `ssml` says: see `text.live_text.LiveText`).
    Everything wrong before that is raised, logged and counted: the client still gets an error status."""
    settings = synthesis.settings
    inbox: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
    reader = asyncio.create_task(_pump(raw, inbox))
    clock = IdleClock(settings.live_idle_timeout_s)
    try:
        with counted_refusal(synthesis, ctx):
            first = await _next(inbox, clock)
            chosen = options(query, {key: value for key, value in (first or {}).items() if key not in _MESSAGE_KEYS})
            # The first message is checked before the answer starts, so a wrong one still gets its error status.
            head = message({key: value for key, value in (first or {}).items() if key in _MESSAGE_KEYS})
        speech, text = await synthesis.speak_live(
            chosen, ctx, timed, phrase_chars, ssml
        )  # logs and counts its own refusals
    except BaseException:
        reader.cancel()
        raise

    async def feed() -> None:
        try:
            ended = first is None or _apply(head, text, clock)
            while not ended:
                item = await _next(inbox, clock, text, settings.live_flush_ms / 1000)
                ended = item is None or _apply(message(item), text, clock)
            text.close()
        except ServiceError as exc:
            log.info("live request ended early: %s", exc.message)
            if speech.job is not None:
                # The request's outcome is the client's mistake (or its silence), under that code.
                speech.job.cancel(f"{exc.code}: {exc.message}", error=exc)
            raise
        except Exception:  # the messages broke off (the connection went): nobody waits for the rest of the text
            if speech.job is not None:
                speech.job.cancel()
            raise

    reader.add_done_callback(_cancel_when_closed(speech))
    return LiveSession(speech, text, chosen, asyncio.create_task(feed()), reader)


class IdleClock:
    """When a live request has been idle too long: only speakable text winds the clock back, so keep-alive
    messages (empty text, flushes) cannot hold a session open for ever."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s

    def spoke(self, text: str) -> None:
        if is_speakable(text):
            self.deadline = time.monotonic() + self.timeout_s

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


def _apply(item: LiveMessage, text: LiveText, clock: IdleClock) -> bool:
    """Apply one message; returns whether it ended the text."""
    if item.text:
        text.add(item.text)
        clock.spoke(item.text)
    if item.flush:
        text.flush()
    return item.end


async def _pump(
    raw: AsyncIterator[dict[str, Any]], inbox: asyncio.Queue[dict[str, Any] | BaseException | None]
) -> Exception | None:
    """The client's messages into a queue, so that waiting for one with a timeout never cancels the reading; returns
    what ended them early, if anything did."""
    try:
        async for item in raw:
            await inbox.put(item)
        await inbox.put(None)
    except Exception as exc:  # handed to the feeder: a malformed body, a client gone
        await inbox.put(exc)
        return exc
    return None


def _cancel_when_closed(speech: Speech) -> Callable[[asyncio.Task[Exception | None]], None]:
    """A reader's end that cancels the synthesis when the client closed its WebSocket, whatever it said before (its
    text may be over, the feeder gone): nobody is there to hear the rest."""

    def ended(reader: asyncio.Task[Exception | None]) -> None:
        if not reader.cancelled() and isinstance(reader.result(), ClientDisconnected) and speech.job is not None:
            speech.job.cancel()

    return ended


async def _next(
    inbox: asyncio.Queue[dict[str, Any] | BaseException | None],
    clock: IdleClock,
    text: LiveText | None = None,
    flush_after: float = 0.0,
) -> dict[str, Any] | None:
    """The next message, None at the end. A partial phrase pending for `flush_after` seconds is spoken meanwhile;
    no speakable text before the idle clock runs out is LiveIdle."""
    while True:
        pending = text is not None and text.pending
        idle_left = clock.left()
        try:
            if not idle_left:
                raise TimeoutError
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that comes just as the message
            # does (CPython gh-86296), which left a closed socket's context waiting out the idle limit.
            async with asyncio.timeout(min(flush_after, idle_left) if pending else idle_left):
                item = await inbox.get()
        except TimeoutError:
            if pending and clock.left():
                assert text is not None
                text.flush()  # the producer paused mid-phrase: speak what there is
                continue
            raise LiveIdle(f"no text to speak for {clock.timeout_s:g} s (POLYTTS_LIVE_IDLE_TIMEOUT_S)") from None
        if isinstance(item, BaseException):
            raise item
        return item


MAX_MESSAGE_BYTES = 1024 * 1024
"""Longest live message over a WebSocket (the NDJSON body's lines are shorter still): far more text than one message
needs, refused before it is parsed."""
MAX_NESTING = 16
"""Deepest nesting of arrays and objects in a live message (its own go three deep)."""


def nesting(value: object) -> int:
    """How deep arrays and objects are nested in a parsed JSON value (without recursion of its own)."""
    deepest, level = 0, [(value, 0)]
    while level:
        item, depth = level.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            level.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_object(raw: str | bytes) -> dict[str, Any]:
    """One live message, a JSON object: bounded in size before it is parsed, and in nesting (a parser's recursion
    on thousands of nested arrays is the same clear error)."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise PayloadTooLarge(f"a live message is longer than {MAX_MESSAGE_BYTES} bytes", code="message_too_large")
    deep = False
    try:
        value = json.loads(raw)
    except RecursionError:
        deep = True
    except ValueError as exc:
        raise InvalidInput(f"a live message is not JSON: {exc}", code="invalid_message") from None
    if deep or nesting(value) > MAX_NESTING:
        raise InvalidInput(f"a live message is nested more than {MAX_NESTING} deep", code="invalid_message")
    if not isinstance(value, dict):
        raise InvalidInput("a live message is a JSON object", code="invalid_message")
    return value


async def receive_object(websocket: WebSocket) -> dict[str, Any] | None:
    """The next JSON object a client sends over the WebSocket (a text or binary frame); None once it has closed it."""
    received = await websocket.receive()
    if received["type"] == "websocket.disconnect":
        return None
    return parse_object(received.get("text") or received.get("bytes") or b"")
