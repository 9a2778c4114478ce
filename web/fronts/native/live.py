"""The native live routes' transports: the NDJSON body of `POST /tts/live` read as it arrives, and the live
WebSocket `/tts/live/ws` (binary audio frames, JSON events)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from audio.word_timings import Words
from errors import ClientDisconnected, PayloadTooLarge, ServiceError
from lifecycle.request_context import RequestContext
from lifecycle.synthesis import SynthesisService
from web.fronts.shared.live import open_session, parse_object, receive_object

LIVE_SUBPROTOCOL = "polytts"
"""The WebSocket subprotocol the live route accepts; a browser, which cannot set headers on a WebSocket, offers its
key beside it as `bearer.<key in unpadded base64url>` (`auth`)."""
MAX_LINE_BYTES = 128 * 1024
"""Longest NDJSON line of a live request body."""


async def json_objects(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a newline-delimited body as its bytes arrive; blank lines are skipped."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield parse_object(line)
        if len(buffer) > MAX_LINE_BYTES:
            raise PayloadTooLarge(f"a live message is longer than {MAX_LINE_BYTES} bytes", code="message_too_large")
    if buffer.strip():
        yield parse_object(buffer)


async def serve_websocket(websocket: WebSocket, synthesis: SynthesisService, ctx: RequestContext) -> None:
    """One live request over an accepted WebSocket: audio as binary frames, then `{"type": "done"}` once the text has
    ended (`{"end": true}`) and all of it is spoken; `words` events after each phrase's audio where the engine times
    words; `{"type": "error", "code", "message"}` and a close when something goes wrong."""
    try:
        session = await open_session(synthesis, ctx, dict(websocket.query_params), _ws_objects(websocket), timed=None)
    except ClientDisconnected:
        return
    except ServiceError as exc:
        await _refuse(websocket, exc)
        return
    fmt = session.options.format or "pcm"
    speech = session.speech
    try:
        await websocket.send_json(
            {
                "type": "start",
                "engine": speech.plan.engine.name,
                "voice": speech.plan.voice_key,
                "format": fmt,
                "sample_rate": speech.plan.engine.sample_rate,
            }
        )
        async with contextlib.aclosing(speech.encoded_events(fmt)) as events:
            async for item in events:
                if isinstance(item, Words):
                    if item.words:
                        await websocket.send_json({"type": "words", "words": [word.public() for word in item.words]})
                else:
                    await websocket.send_bytes(item)
        await websocket.send_json({"type": "done", "audio_seconds": round(speech.timings.audio_seconds(), 3)})
        await websocket.close(1000)
    except ServiceError as exc:
        await _refuse(websocket, session.failure or exc)
    except (
        WebSocketDisconnect,
        ClientDisconnected,
        RuntimeError,
    ):  # the client went away; RuntimeError: a send after it
        pass
    finally:
        await session.close()


async def _refuse(websocket: WebSocket, error: ServiceError) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.send_json({"type": "error", "code": error.code, "message": error.message})
        await websocket.close(1008 if error.status in (401, 403) else 1011 if error.status >= 500 else 1000)


async def _ws_objects(websocket: WebSocket) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects a client sends over the WebSocket, until it closes it."""
    while (received := await receive_object(websocket)) is not None:
        yield received
    raise ClientDisconnected("the client closed the WebSocket")
