"""Deepgram's text-to-speech API (Aura) under `/deepgram`: `POST /v1/speak` and the WebSocket `/v1/speak`, in its
shapes and error body; its clients send their key as `Authorization: Token <key>` (browsers as the `token` query
parameter)."""

from web.front_spec import Front
from web.fronts.deepgram.protocol import PREFIX, DeepgramErrorBody, SpeakBody, error_body, handshake_headers
from web.fronts.deepgram.routes import router

FRONT = Front(
    name="deepgram",
    prefix=PREFIX,
    routers=(router,),
    error_body=error_body,
    error_model=DeepgramErrorBody,
    key_queries=("token",),
    key_schemes=("Token",),
    speech_paths=(PREFIX + "/v1/speak",),
    text_fields=((SpeakBody, "text"),),
    handshake_headers=handshake_headers,
)
