"""Cartesia's text-to-speech API, one more front on the same lifecycle: `POST .../tts/bytes` (the audio as it is
made), `POST .../tts/sse` (server-sent events: `chunk`, `timestamps`, `done`), the WebSocket `.../tts/websocket`, and
the node's voices as `GET .../voices` and `GET .../voices/{id}`, all under PREFIX. Only the shapes differ from the native routes; voices, caches, scheduling, limits, timings and
metrics are the same."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Collection
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import StreamingResponse

from audio.output import Output
from audio.word_timings import Words
from errors import ServiceError
from lifecycle.request_context import RequestContext
from lifecycle.service import Service
from lifecycle.speech import Speech
from text.ssml import with_cartesia_tags
from web import api_docs
from web.dependencies import ServiceDep, SpeechRoute, connection_context
from web.fronts.cartesia.dictionaries import dict_lexicons
from web.fronts.cartesia.protocol import (
    PREFIX,
    CartesiaErrorBody,
    GenerationRequest,
    StepClock,
    VoicesQuery,
    event_error,
    resolve_model,
    voice_view,
    voices_list,
    word_timestamps,
)
from web.fronts.cartesia.socket import serve_socket
from web.fronts.shared.requests import TTSRequest
from web.fronts.shared.speaking import counted_refusal, speak_translated
from web.http_errors import cut_on_failure, websocket_only

router = APIRouter(prefix=PREFIX + "/tts", tags=["cartesia"], route_class=SpeechRoute)
voices_router = APIRouter(prefix=PREFIX + "/voices", tags=["cartesia"])

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_ERRORS = api_docs.errors(404, 413, 422, 429, 503, shape=CartesiaErrorBody)
_AUDIO: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio in `output_format` as it is made (X-Sample-Rate tells its rate); fields this node "
        "ignores are named in X-Ignored-Parameters.",
        "content": dict.fromkeys(
            ("application/octet-stream", "audio/basic", "audio/x-alaw-basic", "audio/wav", "audio/mpeg"), _BINARY
        ),
    }
}
_EVENTS = api_docs.event_stream(
    "Server-sent events, each `data:` a JSON object: `chunk` (`data`: base64 audio in `output_format`), `timestamps` "
    "(`word_timestamps`: `words`, `start`, `end` in seconds) where `add_timestamps` asked, then `done`; `error` if the "
    "synthesis fails once started.",
    ["chunk", "timestamps", "done", "error"],
    {
        "type": "object",
        "required": ["type", "done"],
        "properties": {"type": {"type": "string"}, "done": {"type": "boolean"}},
    },
)
_OK = {"status_code": 200}


async def _speak(
    request: Request, service: Service, body: GenerationRequest, containers: Collection[str], timed: bool
) -> tuple[Speech, Output, dict[str, str]]:
    """The request spoken through the lifecycle, with the audio it asked for and the answer's headers; a bad
    `output_format`, `voice` or `model_id` is refused, logged and counted, before anything is planned."""
    # The route's template, as on every speech route.
    ctx: RequestContext = connection_context(request, request.scope["route"].path.strip("/"), streaming=True)
    with counted_refusal(service.synthesis, ctx):
        audio = body.output_format.output(containers)
        voice_id = body.voice_id()
        ctx.engine = resolve_model(body.model_id, service.pool.engines)
        lexicons = await dict_lexicons(service, body.pronunciation_dict_id)
    native = TTSRequest(
        text=with_cartesia_tags(body.transcript),
        voice_id=voice_id,
        language=body.spoken_language(),
        speed=body.speaking_rate(),
        lexicons=lexicons or None,
    )
    speech, headers = await speak_translated(service.synthesis, native, audio, ctx, timed=timed, ignored=body.ignored())
    return speech, audio, headers


@router.post("/bytes", response_class=StreamingResponse, responses={**_AUDIO, **_ERRORS})
async def tts_bytes(request: Request, body: GenerationRequest, service: ServiceDep) -> StreamingResponse:
    """Speak `transcript` in `voice` (a built-in voice, a blend or a registered voice id): raw samples, a WAV or an
    MP3, as it is made."""
    speech, audio, headers = await _speak(request, service, body, ("raw", "wav", "mp3"), timed=False)
    return StreamingResponse(cut_on_failure(speech.encoded(audio)), media_type=audio.media_type, headers=headers)


@router.post("/sse", response_class=StreamingResponse, responses={**_EVENTS, **_ERRORS})
async def tts_sse(request: Request, body: GenerationRequest, service: ServiceDep) -> StreamingResponse:
    """As `bytes`, as server-sent events: raw audio in `chunk` events and, with `add_timestamps`, the words."""
    timed = bool(body.add_timestamps)
    speech, audio, headers = await _speak(request, service, body, ("raw",), timed=timed)
    tag = {"context_id": body.context_id} if body.context_id is not None else {}

    def event(payload: dict[str, Any]) -> bytes:
        data = json.dumps({**payload, **tag}, separators=(",", ":"))
        return f"event: {payload['type']}\ndata: {data}\n\n".encode()

    async def events() -> AsyncIterator[bytes]:
        clock = StepClock()
        try:
            async with contextlib.aclosing(speech.encoded_events(audio)) as items:
                async for item in items:
                    if isinstance(item, Words):
                        if item.words and timed:
                            stamps = word_timestamps(item.words)
                            yield event({"type": "timestamps", "done": False, "word_timestamps": stamps, **_OK})
                    elif item:
                        data = base64.b64encode(item).decode()
                        yield event({"type": "chunk", "done": False, "data": data, "step_time": clock.step_ms(), **_OK})
            yield event({"type": "done", "done": True, **_OK})
        except ServiceError as exc:  # the answer has started: the failure is its last event
            yield event(event_error(exc, None))

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


router.add_api_route("/websocket", websocket_only, methods=["GET"], include_in_schema=False)


@router.websocket("/websocket")
async def websocket(websocket: WebSocket, service: ServiceDep) -> None:
    """Contexts of text in, audio out (docs/api.md)."""
    await serve_socket(websocket, service)


@voices_router.get("")
async def voices(query: Annotated[VoicesQuery, Query()], service: ServiceDep) -> dict[str, Any]:
    """A page of this node's voices in Cartesia's shape (`data`, `has_more`): registered ones, then the built-ins."""
    builtins = (await asyncio.to_thread(service.catalog.builtins)).values()
    return query.page(voices_list([*service.registry.list(), *builtins]))


@voices_router.get("/{voice_id}", responses=api_docs.errors(404, shape=CartesiaErrorBody))
async def voice(voice_id: str, service: ServiceDep) -> dict[str, Any]:
    return voice_view(await asyncio.to_thread(service.catalog.get, voice_id))
