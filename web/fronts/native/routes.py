"""The native speech routes: `POST /tts` (one file, WAV by default), `POST /tts/stream` (audio as it is made, raw
s16le PCM by default), the live routes `POST`/`PUT /tts/live` and the WebSocket `/tts/live/ws` (text in as it is
written), and `GET /engines` (what each engine takes)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from audio.encoding import AUDIO_FORMATS, MEDIA_TYPES
from audio.word_timings import CaptionFormat, captions
from errors import InvalidInput, ServiceError
from text.languages import LANGUAGES
from web import api_docs
from web.dependencies import ServiceDep, SpeechContext, SpeechRoute, StreamContext, connection_context
from web.fronts.native.live import LIVE_SUBPROTOCOL, json_objects, serve_websocket
from web.fronts.native.protocol import EngineCatalog, TimedSpeech
from web.fronts.shared.live import open_session
from web.fronts.shared.requests import LiveMessage, LiveOptions, TTSRequest
from web.http_errors import cut_on_failure, websocket_only

CAPTION_MEDIA_TYPES: dict[CaptionFormat, str] = {
    "vtt": "text/vtt; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
}

router = APIRouter(route_class=SpeechRoute, tags=["speech"])

_SPEECH_ERRORS = api_docs.errors(404, 413, 422, 429, 503)
_CAPTIONS = {media_type.split(";")[0]: {"schema": {"type": "string"}} for media_type in CAPTION_MEDIA_TYPES.values()}
_FILE = api_docs.audio(
    "wav",
    "The whole audio; with `timestamps`, JSON with the audio and its word timings; with format vtt or srt, "
    "captions (only X-Engine then).",
    more=_CAPTIONS,
    model=TimedSpeech,
    always=["X-Engine"],
)
_STREAM = api_docs.audio("pcm", "The audio as it is made (a chunked body).")


@router.post("/tts", response_class=Response, responses={**_FILE, **_SPEECH_ERRORS})
async def tts(body: TTSRequest, service: ServiceDep, ctx: SpeechContext) -> Response:
    fmt = body.format or "wav"
    if fmt == "vtt" or fmt == "srt":
        # Captions are timed by the words of the whole synthesis: it is read to its end first.
        speech = await service.synthesis.speak(body, ctx, timed=True)
        await speech.read("pcm")
        headers = {"X-Engine": speech.plan.engine.name, "Server-Timing": speech.timings.server_timing()}
        return Response(captions(speech.words, fmt), media_type=CAPTION_MEDIA_TYPES[fmt], headers=headers)
    speech = await service.synthesis.speak(body, ctx, timed=body.timestamps)
    audio = await speech.read(fmt)
    headers = {**speech.headers(fmt), "Server-Timing": speech.timings.server_timing()}
    if body.timestamps:
        timed = TimedSpeech(
            audio=base64.b64encode(audio).decode(),
            format=fmt,
            sample_rate=speech.plan.engine.sample_rate,
            words=[word.public() for word in speech.words],
        )
        return JSONResponse(timed.model_dump(), headers=headers)
    return Response(audio, media_type=MEDIA_TYPES[fmt], headers=headers)


@router.post("/tts/stream", response_class=StreamingResponse, responses={**_STREAM, **_SPEECH_ERRORS})
async def tts_stream(body: TTSRequest, service: ServiceDep, ctx: StreamContext) -> StreamingResponse:
    fmt = body.format or "pcm"
    if fmt not in AUDIO_FORMATS or body.timestamps:
        refused = InvalidInput(
            "word timings come with POST /tts or the live WebSocket, not a raw stream", code="timestamps_unsupported"
        )
        service.synthesis.rejected(ctx.route, refused, ctx.client)  # before the lifecycle: logged and counted so
        raise refused
    speech = await service.synthesis.speak(body, ctx)
    return StreamingResponse(
        cut_on_failure(speech.encoded(fmt)), media_type=MEDIA_TYPES[fmt], headers=speech.headers(fmt)
    )


@router.get("/engines")
async def engines(service: ServiceDep) -> EngineCatalog:
    """Each engine this node runs, with the JSON schema of its per-request parameters (ranges and defaults), and
    the languages a request may name."""
    languages = {lang.code: lang for lang in LANGUAGES.values()}.values()  # one entry per language, not per alias
    return EngineCatalog.model_validate(
        {
            "engines": service.engine_descriptions(),
            "languages": [{"code": lang.code, "name": lang.name} for lang in languages],
        }
    )


class DuplexStreamingResponse(StreamingResponse):
    """A streamed response sent while its request body is still being read: unlike StreamingResponse it does not
    read the connection itself to notice a disconnect (that would swallow the body); the body's reader does."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)


_LIVE: dict[str, Any] = {
    "response_class": DuplexStreamingResponse,
    "responses": {**_STREAM, **api_docs.errors(404, 408, 413, 422, 429, 503)},
    "openapi_extra": api_docs.live_body(LiveOptions, LiveMessage),
}


@router.post("/tts/live", **_LIVE)
@router.put("/tts/live", **_LIVE)  # curl -T .
async def tts_live(request: Request, service: ServiceDep) -> Response:
    """Text in as it is written (newline-delimited JSON messages in a streamed body), speech out as each phrase is
    complete; options in the query string or the first message."""
    ctx = connection_context(request, "tts/live", streaming=True)
    session = await open_session(
        service.synthesis, ctx, dict(request.query_params), json_objects(request.stream()), timed=False
    )
    fmt = session.options.format or "pcm"

    async def body() -> AsyncIterator[bytes]:
        watcher = asyncio.create_task(session.cancel_when_gone(request.receive))
        try:
            async for chunk in session.speech.encoded(fmt):
                yield chunk
        except ServiceError:
            # Raw audio has no way to say what went wrong (a bad message, silence past the idle limit, a failure of
            # the server's): the body is cut, so the client sees an incomplete answer, never a clean end.
            if not watcher.done():  # unless the client left: nobody is there to see it
                raise
        finally:
            watcher.cancel()
            await session.close()

    return DuplexStreamingResponse(
        cut_on_failure(body()), media_type=MEDIA_TYPES[fmt], headers=session.speech.headers(fmt)
    )


router.add_api_route("/tts/live/ws", websocket_only, methods=["GET"], include_in_schema=False)


@router.websocket("/tts/live/ws")
async def tts_live_ws(websocket: WebSocket, service: ServiceDep) -> None:
    """The live route for browsers and agents: JSON messages in; binary audio frames and JSON events out (`words`,
    `done`, `error`). The API key comes as the subprotocol `bearer.<base64url key>` (or an Authorization header)."""
    # A draining node refuses the handshake (web.http_errors answers the error): a balancer retries elsewhere.
    service.synthesis.check_open()
    offered = websocket.scope.get("subprotocols", [])
    await websocket.accept(subprotocol=LIVE_SUBPROTOCOL if LIVE_SUBPROTOCOL in offered else None)
    ctx = connection_context(websocket, "tts/live/ws", streaming=True)
    await serve_websocket(websocket, service.synthesis, ctx)
