"""The native speech routes: `POST /tts` (one file, WAV by default) and `POST /tts/stream` (audio as it is made, raw
s16le PCM by default)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response, StreamingResponse

from audio import MEDIA_TYPES
from dependencies import ServiceDep, SpeechContext, SpeechRoute
from protocol import TTSRequest

router = APIRouter(route_class=SpeechRoute, tags=["speech"])


@router.post("/tts", response_class=Response)
async def tts(body: TTSRequest, service: ServiceDep, ctx: SpeechContext) -> Response:  # type: ignore[valid-type]
    fmt = body.format or "wav"
    speech = await service.synthesis.speak(body, ctx)
    audio = await speech.read(fmt)
    headers = {**speech.headers(fmt), "Server-Timing": speech.timings.server_timing()}
    return Response(audio, media_type=MEDIA_TYPES[fmt], headers=headers)


@router.post("/tts/stream", response_class=StreamingResponse)
async def tts_stream(body: TTSRequest, service: ServiceDep, ctx: SpeechContext) -> StreamingResponse:  # type: ignore[valid-type]
    fmt = body.format or "pcm"
    speech = await service.synthesis.speak(body, ctx)
    return StreamingResponse(speech.encoded(fmt), media_type=MEDIA_TYPES[fmt], headers=speech.headers(fmt))


@router.get("/engines")
async def engines(service: ServiceDep) -> dict[str, Any]:
    """Each engine this node runs, with the JSON schema of its per-request parameters (ranges and defaults)."""
    return {"engines": service.engine_descriptions()}
