"""ElevenLabs' text-to-speech API, one more front on the same lifecycle: `POST .../v1/text-to-speech/{voice_id}`
(and `/stream`, `/with-timestamps`, `/stream/with-timestamps`), the `stream-input` and `multi-stream-input`
WebSockets, `GET .../v1/voices`, `GET .../v2/voices` (pages), `GET .../v1/voices/{voice_id}` and `GET .../v1/models`,
all under PREFIX. Only the
shapes differ from the native routes; voices, caches, scheduling, limits, timings and metrics are the same."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse

from audio.output import Output
from lifecycle.request_context import RequestContext
from lifecycle.service import Service
from lifecycle.speech import Speech
from text.ssml import with_vendor_tags
from web import api_docs
from web.dependencies import ServiceDep, SpeechRoute, connection_context
from web.fronts.elevenlabs.dictionaries import locator_lexicons
from web.fronts.elevenlabs.protocol import (
    DEFAULT_OUTPUT_FORMAT,
    OUTPUT_FORMATS,
    PREFIX,
    ElevenLabsErrorBody,
    SpeechBody,
    TimedAudio,
    VoicesSearch,
    alignment,
    media_type,
    models_list,
    output,
    resolve_model,
    segments,
    voice_view,
    voices_list,
)
from web.fronts.elevenlabs.socket import serve_socket
from web.fronts.shared.requests import TTSRequest
from web.fronts.shared.speaking import counted_refusal, speak_translated
from web.http_errors import cut_on_failure, websocket_only

router = APIRouter(prefix=PREFIX + "/v1", tags=["elevenlabs"], route_class=SpeechRoute)
v2_router = APIRouter(prefix=PREFIX + "/v2", tags=["elevenlabs"])

OutputFormat = Annotated[
    str,
    Query(
        description=f"One of {', '.join(OUTPUT_FORMATS)}: raw s16le PCM, μ-law or A-law at that rate, MP3 or Ogg Opus at a "
        "rate and bit rate (kbit/s); resampled from the engine's rate where they differ.",
        json_schema_extra={"enum": list(OUTPUT_FORMATS)},
    ),
]
_BINARY = {"schema": {"type": "string", "format": "binary"}}
_AUDIO_TYPES = ("audio/mpeg", "audio/pcm", "audio/basic", "audio/x-alaw-basic", "audio/ogg")
_ERRORS = api_docs.errors(404, 413, 422, 429, 503, shape=ElevenLabsErrorBody)
_AUDIO: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio in `output_format` as it is made (X-Sample-Rate tells its rate); fields this node "
        "ignores are named in X-Ignored-Parameters.",
        "content": dict.fromkeys(_AUDIO_TYPES, _BINARY),
    }
}
NDJSON = "application/x-ndjson"
_TIMED_LINES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "One JSON object per line, each a `TimedAudio`: a chunk's audio with the characters it speaks "
        "(times in seconds from the start of the audio).",
        "content": {NDJSON: {"schema": {"$ref": "#/components/schemas/TimedAudio"}}},
    }
}


def _context(request: Request, streaming: bool) -> RequestContext:
    # The route's template: a path per voice would be a label per voice.
    return connection_context(request, request.scope["route"].path.strip("/"), streaming=streaming)


async def _speak(
    service: Service, voice_id: str, body: SpeechBody, output_format: str, ctx: RequestContext, timed: bool
) -> tuple[Speech, Output, dict[str, str]]:
    """The request spoken through the lifecycle, with the audio it asked for and the answer's headers; a bad
    `output_format` or `model_id` is refused, logged and counted, before anything is planned."""
    with counted_refusal(service.synthesis, ctx):
        audio = output(output_format)
        ctx.engine = resolve_model(body.model_id, service.pool.engines)
        lexicons = await locator_lexicons(service, body.pronunciation_dictionary_locators)
    native = TTSRequest(
        text=with_vendor_tags(body.text),
        voice_id=voice_id,
        language=body.language_code,
        speed=body.speed(),
        lexicons=lexicons or None,
    )
    speech, headers = await speak_translated(service.synthesis, native, audio, ctx, timed=timed, ignored=body.ignored())
    return speech, audio, headers


async def _audio_answer(
    request: Request, voice_id: str, body: SpeechBody, output_format: str, service: Service, live: bool
) -> StreamingResponse:
    ctx = _context(request, streaming=live)
    speech, audio, headers = await _speak(service, voice_id, body, output_format, ctx, timed=False)
    return StreamingResponse(cut_on_failure(speech.encoded(audio)), media_type=media_type(audio), headers=headers)


@router.post("/text-to-speech/{voice_id}", response_class=StreamingResponse, responses={**_AUDIO, **_ERRORS})
async def convert(
    request: Request,
    voice_id: str,
    body: SpeechBody,
    service: ServiceDep,
    output_format: OutputFormat = DEFAULT_OUTPUT_FORMAT,
) -> StreamingResponse:
    """Speak `text` in the voice `voice_id` (a built-in voice, a blend or a registered voice id)."""
    return await _audio_answer(request, voice_id, body, output_format, service, live=False)


@router.post("/text-to-speech/{voice_id}/stream", response_class=StreamingResponse, responses={**_AUDIO, **_ERRORS})
async def stream(
    request: Request,
    voice_id: str,
    body: SpeechBody,
    service: ServiceDep,
    output_format: OutputFormat = DEFAULT_OUTPUT_FORMAT,
) -> StreamingResponse:
    """As `convert`, played as it arrives: the scheduler keeps it ahead of its listener."""
    return await _audio_answer(request, voice_id, body, output_format, service, live=True)


@router.post("/text-to-speech/{voice_id}/with-timestamps", response_model=TimedAudio, responses=_ERRORS)
async def convert_with_timestamps(
    request: Request,
    voice_id: str,
    body: SpeechBody,
    service: ServiceDep,
    output_format: OutputFormat = DEFAULT_OUTPUT_FORMAT,
) -> JSONResponse:
    """The whole audio, base64, with each character's start and end (from the engine's word timings: Kokoro)."""
    ctx = _context(request, streaming=False)
    speech, audio, headers = await _speak(service, voice_id, body, output_format, ctx, timed=True)
    encoded = b"".join([piece async for piece in speech.encoded(audio)])
    found = alignment(speech.words, lead_space=False)
    answer = TimedAudio.model_validate(
        {"audio_base64": base64.b64encode(encoded).decode(), "alignment": found, "normalized_alignment": found}
    )
    return JSONResponse(answer.model_dump(), headers=headers)


@router.post(
    "/text-to-speech/{voice_id}/stream/with-timestamps",
    response_class=StreamingResponse,
    responses={**_TIMED_LINES, **_ERRORS},
)
async def stream_with_timestamps(
    request: Request,
    voice_id: str,
    body: SpeechBody,
    service: ServiceDep,
    output_format: OutputFormat = DEFAULT_OUTPUT_FORMAT,
) -> StreamingResponse:
    """One JSON line per chunk as it is made: its audio (base64) and the characters it speaks, in seconds."""
    ctx = _context(request, streaming=True)
    speech, audio, headers = await _speak(service, voice_id, body, output_format, ctx, timed=True)

    async def lines() -> AsyncIterator[bytes]:
        first = True
        async for segment in segments(speech, audio, hold=True):
            found = alignment(segment.words, lead_space=not first) if segment.words else None
            first = first and not segment.words
            line = {
                "audio_base64": base64.b64encode(segment.audio).decode(),
                "alignment": found,
                "normalized_alignment": found,
            }
            yield json.dumps(line, separators=(",", ":")).encode() + b"\n"

    return StreamingResponse(cut_on_failure(lines()), media_type=NDJSON, headers=headers)


@router.get("/voices")
async def voices(service: ServiceDep) -> dict[str, Any]:
    """Every voice of this node in ElevenLabs' shape: registered ones (`cloned`), then the built-ins (`premade`)."""
    builtins = (await asyncio.to_thread(service.catalog.builtins)).values()
    return voices_list([*service.registry.list(), *builtins])


@v2_router.get("/voices")
async def search_voices(query: Annotated[VoicesSearch, Query()], service: ServiceDep) -> dict[str, Any]:
    """A page of this node's voices in ElevenLabs' shape (`voices`, `has_more`, `next_page_token`)."""
    builtins = (await asyncio.to_thread(service.catalog.builtins)).values()
    return query.page(voices_list([*service.registry.list(), *builtins])["voices"])


@router.get("/voices/{voice_id}", responses=api_docs.errors(404, shape=ElevenLabsErrorBody))
async def voice(voice_id: str, service: ServiceDep) -> dict[str, Any]:
    return voice_view(await asyncio.to_thread(service.catalog.get, voice_id))


@router.get("/models")
async def models(service: ServiceDep) -> list[dict[str, Any]]:
    return models_list(service.pool.engines)


_SOCKETS = ("/text-to-speech/{voice_id}/stream-input", "/text-to-speech/{voice_id}/multi-stream-input")


for _path in _SOCKETS:
    router.add_api_route(_path, websocket_only, methods=["GET"], include_in_schema=False)


@router.websocket("/text-to-speech/{voice_id}/stream-input")
async def stream_input(websocket: WebSocket, voice_id: str, service: ServiceDep) -> None:
    """One stream of text in, audio out (docs/api.md)."""
    await serve_socket(websocket, voice_id, service, multi=False)


@router.websocket("/text-to-speech/{voice_id}/multi-stream-input")
async def multi_stream_input(websocket: WebSocket, voice_id: str, service: ServiceDep) -> None:
    """Several contexts on one socket, each its own live request (docs/api.md)."""
    await serve_socket(websocket, voice_id, service, multi=True)
