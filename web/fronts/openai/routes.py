"""The OpenAI speech API, a front on the same lifecycle: `POST /v1/audio/speech`, `GET /v1/models`,
`GET /v1/audio/models`, `GET /v1/audio/voices`. Only the request shape, the error shape, the voice names and the
default format differ from the native routes; voices, caches, scheduling, limits, timings and metrics are the same."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from audio.encoding import MEDIA_TYPES
from engines import FAMILIES
from errors import ServiceError
from lifecycle.service import Service
from web import api_docs
from web.dependencies import ServiceDep, SpeechRoute, StreamContext
from web.fronts.openai.protocol import (
    SSE_MEDIA_TYPE,
    OpenAIErrorBody,
    SpeechRequest,
    models_list,
    resolve_model,
    resolve_voice,
    speech_events,
    speech_usage,
    voices_list,
)
from web.fronts.openai.voices import voice_table
from web.fronts.shared.requests import TTSRequest
from web.fronts.shared.speaking import counted_refusal
from web.http_errors import cut_on_failure

PREFIX = "/v1"
"""Where the front lives: a client's base URL is `http://<node>/v1`, as OpenAI's is `https://api.openai.com/v1`."""

router = APIRouter(prefix=PREFIX, tags=["openai"], route_class=SpeechRoute)

SPEECH_EVENT = {
    "description": "One server-sent event of `POST /v1/audio/speech` (OpenAI's speech events).",
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["type", "audio"],
                        "properties": {
                            "type": {"const": "speech.audio.delta"},
                            "audio": {"type": "string", "contentEncoding": "base64"},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["type", "usage"],
                        "properties": {
                            "type": {"const": "speech.audio.done"},
                            "usage": {
                                "type": "object",
                                "required": ["input_tokens", "output_tokens", "total_tokens"],
                                "properties": {
                                    name: {"type": "integer", "minimum": 0}
                                    for name in ("input_tokens", "output_tokens", "total_tokens")
                                },
                            },
                        },
                    },
                    {"$ref": api_docs.COMPONENTS + OpenAIErrorBody.__name__},
                ]
            },
        }
    },
}
"""Usage counts input characters and output audio in 20 ms frames (protocol.speech_usage)."""
_SPEECH = api_docs.audio(
    "mp3",
    'The audio as it is made; with `stream_format: "sse"`, server-sent events instead, each `data:` one JSON '
    "event: `speech.audio.delta` (base64 audio in `response_format`), then `speech.audio.done` with usage, or an "
    "error that ends the stream.",
    more={SSE_MEDIA_TYPE: {"schema": SPEECH_EVENT}},
)


def voice_names(service: ServiceDep) -> dict[str, str]:
    """OpenAI's voice names and the voices they speak with: the defaults, then POLYTTS_OPENAI_VOICES."""
    return voice_table(service.settings.openai_voices)


VoiceNames = Annotated[dict[str, str], Depends(voice_names)]


@router.post(
    "/audio/speech",
    response_class=StreamingResponse,
    responses={**_SPEECH, **api_docs.errors(404, 413, 422, 429, 503, shape=OpenAIErrorBody)},
)
async def speech(
    body: SpeechRequest, service: ServiceDep, ctx: StreamContext, voice_names: VoiceNames
) -> StreamingResponse:
    with counted_refusal(service.synthesis, ctx):
        ctx.engine = resolve_model(body.model, service.settings.default_engine, service.pool.engines)
    voice_id = resolve_voice(body.voice, voice_names)
    honoured = bool(body.instructions) and await takes_instructions(service, voice_id)
    native = TTSRequest(
        text=body.input,
        voice_id=voice_id,
        # Speed 1 is every engine's pace; any other speed goes to the engine, which refuses it if it has none.
        speed=body.speed if body.speed != 1.0 else None,
        instruct=body.instructions if honoured else None,
        lexicons=body.lexicons,
    )
    speech = await service.synthesis.speak(native, ctx)
    headers = speech.headers(body.response_format)
    if body.instructions and not honoured:
        headers["X-Ignored-Parameters"] = "instructions"
    if body.stream_format == "sse":
        events = speech_events(
            speech.encoded(body.response_format),
            lambda: speech_usage(body.input, speech.timings.audio_seconds()),  # read once the audio is complete
        )
        return StreamingResponse(
            cut_on_failure(events),
            media_type=SSE_MEDIA_TYPE,
            headers=headers,
        )
    return StreamingResponse(
        cut_on_failure(speech.encoded(body.response_format)),
        media_type=MEDIA_TYPES[body.response_format],
        headers=headers,
    )


async def takes_instructions(service: Service, voice_id: str) -> bool:
    """Whether the voice's engine takes a style prompt (`instruct`: CosyVoice's); a voice that does not resolve is
    left to the lifecycle, which refuses it as it refuses every request."""
    try:
        voice = await service.catalog.resolve(voice_id)
    except ServiceError:
        return False
    return "instruct" in FAMILIES[voice.engine].params.model_fields


@router.get("/models")
async def models(service: ServiceDep) -> dict[str, Any]:
    return models_list(service.pool.engines, service.settings.default_engine, int(service.started_at))


@router.get("/audio/models")
async def audio_models(service: ServiceDep) -> dict[str, Any]:
    """The speech models, for clients that ask the audio API for them (Open WebUI's model list reads `models`)."""
    listed = models_list(service.pool.engines, service.settings.default_engine, int(service.started_at))
    return {**listed, "models": listed["data"]}


@router.get("/audio/voices")
async def voices(service: ServiceDep, voice_names: VoiceNames) -> dict[str, Any]:
    builtins = (await asyncio.to_thread(service.catalog.builtins)).values()
    return voices_list(builtins, service.registry.list(), voice_names)
