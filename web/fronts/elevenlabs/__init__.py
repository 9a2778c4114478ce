"""ElevenLabs' text-to-speech API under `/elevenlabs`: its HTTP routes, its `stream-input` and `multi-stream-input`
WebSockets, voices and models, in its shapes and error body; its clients send their key as `xi-api-key`."""

from web.front_spec import Front, KeyHeader
from web.fronts.elevenlabs.dictionaries import router as dictionaries
from web.fronts.elevenlabs.protocol import PREFIX, ElevenLabsErrorBody, SpeechBody, error_body
from web.fronts.elevenlabs.routes import router, v2_router

FRONT = Front(
    name="elevenlabs",
    prefix=PREFIX,
    routers=(router, v2_router, dictionaries),
    error_body=error_body,
    error_model=ElevenLabsErrorBody,
    key_headers=(KeyHeader("xi-api-key", "ElevenLabs' clients"),),
    key_queries=("xi-api-key",),
    speech_paths=(PREFIX + "/v1/text-to-speech",),
    text_fields=((SpeechBody, "text"),),
)
