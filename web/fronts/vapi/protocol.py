"""Vapi's custom voice (`voice.provider: "custom-voice"`) as PolyTTS answers it, without a web framework: the
`voice-request` webhook's body, the voice its server URL names, and the error body.

Vapi POSTs `{"message": {"type": "voice-request", "text", "sampleRate", ...the call's metadata}}` to the assistant's
`voice.server.url`, with the server's `secret` as `X-VAPI-SECRET`, and plays the answer's body as it arrives: raw
16-bit little-endian mono PCM at `sampleRate`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from audio.output import Output
from errors import InvalidInput, ServiceError
from lifecycle.request_context import REQUEST_ID

PREFIX = "/vapi"
"""Where the front lives: an assistant's `voice.server.url` is `http://<node>/vapi/synthesize` (with `?voice=` for a
voice other than the node's default)."""
SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)


class VoiceRequestMessage(BaseModel):
    """`message` of the webhook; the call's metadata beside it (`call`, `assistant`, `timestamp`...) is ignored."""

    model_config = ConfigDict(extra="allow")

    type: Literal["voice-request"]
    text: str = Field(description="Text to speak.", json_schema_extra={"minLength": 1})
    sample_rate: int = Field(
        alias="sampleRate", description=f"Hz of the PCM to answer: one of {', '.join(map(str, SAMPLE_RATES))}."
    )

    def output(self) -> Output:
        """Raw s16le at the asked rate; a 422 that lists the rates answered otherwise."""
        if self.sample_rate not in SAMPLE_RATES:
            raise InvalidInput(
                f"sampleRate {self.sample_rate} is not one of {', '.join(map(str, SAMPLE_RATES))}",
                code="invalid_output_format",
                detail={"param": "message.sampleRate"},
            )
        return Output("pcm", self.sample_rate)


class VoiceRequest(BaseModel):
    """Body of `POST .../synthesize`: Vapi's `voice-request` server message."""

    model_config = ConfigDict(extra="allow")

    message: VoiceRequestMessage


class VoiceQuery(BaseModel):
    """The query of the server URL the assistant is configured with: who speaks (Vapi sends no voice of its own)."""

    voice: str | None = Field(
        None, max_length=256, description="A built-in voice, a blend or a registered voice id; the node's default."
    )
    language: str | None = Field(None, max_length=64, description="The voice's own when omitted.")


class VapiErrorDetail(BaseModel):
    code: str = Field(description="Our stable code, e.g. `voice_not_found`, `invalid_output_format`.")
    message: str


class VapiErrorBody(BaseModel):
    """The body of every error the Vapi route answers (Vapi logs it and speaks with its fallback voice)."""

    error: VapiErrorDetail
    request_id: str = Field(description="The request's X-Request-Id.")


def error_body(exc: ServiceError) -> dict[str, Any]:
    return {"error": {"code": exc.code, "message": exc.message}, "request_id": REQUEST_ID.get() or ""}
