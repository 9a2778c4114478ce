"""Cartesia's text-to-speech API under `/cartesia`: `tts/bytes`, `tts/sse`, the `tts/websocket` of contexts and
`voices`, in its shapes and error body; its clients send their key as `X-API-Key` (on a WebSocket also as `api_key`)."""

from web.front_spec import Front, KeyHeader
from web.fronts.cartesia.dictionaries import router as dictionaries
from web.fronts.cartesia.protocol import PREFIX, CartesiaErrorBody, GenerationRequest, error_body
from web.fronts.cartesia.routes import router, voices_router

FRONT = Front(
    name="cartesia",
    prefix=PREFIX,
    routers=(router, voices_router, dictionaries),
    error_body=error_body,
    error_model=CartesiaErrorBody,
    key_headers=(KeyHeader("X-API-Key", "Cartesia's"),),
    key_queries=("api_key",),
    speech_paths=(PREFIX + "/tts",),
    text_fields=((GenerationRequest, "transcript"),),
)
