"""Request and response models of the HTTP API."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

ENGINE_PARAMS = ("speed", "cfg_value", "inference_timesteps", "normalize", "denoise")
"""Request fields that are generation parameters of one engine (`Engine.params`); another engine's is a 422."""


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
    speed: float | None = Field(None, ge=0.5, le=2.0, description="Kokoro: speaking rate (default 1.0).")
    cfg_value: float | None = Field(None, ge=0.5, le=10.0, description="VoxCPM: guidance scale (default 2.0).")
    inference_timesteps: int | None = Field(
        None, ge=1, le=100, description="VoxCPM: diffusion steps per patch (default 10); more is slower and finer."
    )
    normalize: bool | None = Field(None, description="VoxCPM: normalise numbers and symbols first (default false).")
    denoise: bool | None = Field(
        None, description="VoxCPM: denoise the voice's prompt audio first (default false; needs POLYTTS_VOXCPM_DENOISER)."
    )
    max_chars_per_gen: int | None = Field(
        None, ge=0, le=100_000, description="Cap on the characters of one generation; 0 is unlimited (engine default)."
    )
    max_sentences_per_gen: int | None = Field(
        None, ge=0, le=1_000, description="Cap on the sentences of one generation; 0 is unlimited (engine default)."
    )


class VoiceCreated(BaseModel):
    voice_id: str
    created: bool
    """False when the same registration already existed and nothing was written."""


class UnloadResult(BaseModel):
    unloaded: list[str]
