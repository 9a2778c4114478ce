"""Deepgram's text-to-speech API, one more front on the same lifecycle: `POST .../v1/speak` (the audio as it is made)
and the WebSocket `.../v1/speak`, under PREFIX. Only the shapes differ from the native routes; voices, caches,
scheduling, limits, timings and metrics are the same."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import StreamingResponse

from web import api_docs
from web.dependencies import ServiceDep, SpeechRoute, connection_context
from web.fronts.deepgram.protocol import (
    PREFIX,
    DeepgramErrorBody,
    SpeakBody,
    SpeakQuery,
    model_voice,
    speak_headers,
)
from web.fronts.deepgram.socket import serve_socket
from web.fronts.shared.requests import TTSRequest
from web.fronts.shared.speaking import counted_refusal, speak_translated
from web.http_errors import cut_on_failure

router = APIRouter(prefix=PREFIX + "/v1", tags=["deepgram"], route_class=SpeechRoute)

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_AUDIO_TYPES = ("audio/mpeg", "audio/wav", "audio/ogg", "audio/flac", "audio/aac", "audio/basic", "audio/x-alaw-basic")
_ERRORS = api_docs.errors(404, 413, 422, 429, 503, shape=DeepgramErrorBody)
_HEADER = {"schema": {"type": "string"}}
_AUDIO: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio in `encoding` and `container` as it is made (X-Sample-Rate tells its rate), with "
        "Deepgram's `dg-request-id` (the X-Request-Id), `dg-model-name`, `dg-model-uuid` and `dg-char-count`.",
        "headers": dict.fromkeys(("dg-request-id", "dg-model-name", "dg-model-uuid", "dg-char-count"), _HEADER),
        "content": dict.fromkeys(("application/octet-stream", *_AUDIO_TYPES), _BINARY),
    }
}


@router.post("/speak", response_class=StreamingResponse, responses={**_AUDIO, **_ERRORS})
async def speak(
    request: Request, body: SpeakBody, query: Annotated[SpeakQuery, Query()], service: ServiceDep
) -> StreamingResponse:
    """Speak `text` in the voice `model` names (an Aura model's stock voice, or a voice of this node)."""
    ctx = connection_context(request, request.scope["route"].path.strip("/"), streaming=True)
    with counted_refusal(service.synthesis, ctx):
        audio = query.output(socket=False)
        voice = model_voice(query.model)
    native = TTSRequest(text=body.text, voice_id=voice, speed=query.speaking_rate())
    speech, headers = await speak_translated(
        service.synthesis, native, audio, ctx, timed=False, ignored=query.ignored()
    )
    headers |= speak_headers(query.model_name(), body.text)
    return StreamingResponse(cut_on_failure(speech.encoded(audio)), media_type=audio.media_type, headers=headers)


@router.websocket("/speak")
async def speak_socket(websocket: WebSocket, service: ServiceDep) -> None:
    """Text in, audio out (docs/api.md)."""
    await serve_socket(websocket, service)
