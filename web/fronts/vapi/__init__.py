"""Vapi's custom voice under `/vapi`: the `voice-request` webhook (`POST /synthesize`), in its shapes and an error
body of its own; Vapi sends the server's secret as `X-VAPI-SECRET`, read as a key."""

from web.front_spec import Front, KeyHeader
from web.fronts.vapi.protocol import PREFIX, VapiErrorBody, VoiceRequestMessage, error_body
from web.fronts.vapi.routes import router

FRONT = Front(
    name="vapi",
    prefix=PREFIX,
    routers=(router,),
    error_body=error_body,
    error_model=VapiErrorBody,
    key_headers=(KeyHeader("X-VAPI-SECRET", "Vapi's"),),
    speech_paths=(PREFIX + "/synthesize",),
    text_fields=((VoiceRequestMessage, "text"),),
)
