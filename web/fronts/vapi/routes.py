"""Vapi's custom voice webhook, one more front on the same lifecycle: `POST .../synthesize` answers a `voice-request`
with raw PCM at its `sampleRate`, streamed as it is made. Voices, caches, scheduling, limits, timings and metrics are
the same as on every route."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from audio.encoding import MEDIA_TYPES
from web import api_docs
from web.dependencies import ServiceDep, SpeechRoute, connection_context
from web.fronts.shared.requests import TTSRequest
from web.fronts.shared.speaking import counted_refusal, speak_translated
from web.fronts.vapi.protocol import PREFIX, VapiErrorBody, VoiceQuery, VoiceRequest
from web.http_errors import cut_on_failure

router = APIRouter(prefix=PREFIX, tags=["vapi"], route_class=SpeechRoute)

_AUDIO: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Raw 16-bit little-endian mono PCM at `message.sampleRate`, as it is made.",
        "content": {MEDIA_TYPES["pcm"]: {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post(
    "/synthesize",
    response_class=StreamingResponse,
    responses={**_AUDIO, **api_docs.errors(404, 413, 422, 429, 503, shape=VapiErrorBody)},
)
async def synthesize(
    request: Request, body: VoiceRequest, query: Annotated[VoiceQuery, Query()], service: ServiceDep
) -> StreamingResponse:
    """Speak a Vapi `voice-request`'s `text` in the voice the URL names (the node's default otherwise)."""
    ctx = connection_context(request, request.scope["route"].path.strip("/"), streaming=True)
    with counted_refusal(service.synthesis, ctx):
        audio = body.message.output()
    native = TTSRequest(text=body.message.text, voice_id=query.voice, language=query.language)
    speech, headers = await speak_translated(service.synthesis, native, audio, ctx, timed=False, ignored=())
    return StreamingResponse(cut_on_failure(speech.encoded(audio)), media_type=MEDIA_TYPES["pcm"], headers=headers)
