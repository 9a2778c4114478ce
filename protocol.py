"""Request and response models of the HTTP API."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

MIN_SPEED = 0.5
MAX_SPEED = 2.0


class TTSRequest(BaseModel):
    """Body of `POST /tts` and `POST /tts/stream`."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="Text to speak. Longer than POLYTTS_MAX_TEXT_CHARS is a 413.")
    voice_id: str | None = Field(
        None,
        validation_alias=AliasChoices("voice_id", "voice"),
        description="A registered voice id or a built-in voice name; the server default when omitted.",
    )
    language: str | None = Field(None, description="ISO code, locale or English name, e.g. 'en', 'en-GB', 'Japanese'.")
    speed: float = Field(1.0, ge=MIN_SPEED, le=MAX_SPEED, description="Speaking rate, 1.0 is normal.")


class VoiceCreated(BaseModel):
    voice_id: str
    created: bool
    """False when the same registration already existed and nothing was written."""


class UnloadResult(BaseModel):
    unloaded: list[str]
