"""Request and response models of the HTTP API."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

ENGINE_PARAMS = (
    "speed", "cfg_value", "inference_timesteps", "normalize", "denoise",
    "temperature", "top_k", "top_p", "repetition_penalty", "subtalker_temperature", "subtalker_top_k",
    "subtalker_top_p", "max_new_tokens", "non_streaming_mode",
)  # fmt: skip
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
    temperature: float | None = Field(None, gt=0, le=2.0, description="Qwen3-TTS: sampling temperature (default 0.9).")
    top_k: int | None = Field(None, ge=1, le=1000, description="Qwen3-TTS: top-k sampling (default 50).")
    top_p: float | None = Field(None, gt=0, le=1.0, description="Qwen3-TTS: nucleus sampling (default 1.0).")
    repetition_penalty: float | None = Field(
        None, gt=0, le=2.0, description="Qwen3-TTS: penalty on repeating codes (default 1.05)."
    )
    subtalker_temperature: float | None = Field(
        None, gt=0, le=2.0, description="Qwen3-TTS: sampling temperature of the residual codebooks (default 0.9)."
    )
    subtalker_top_k: int | None = Field(
        None, ge=1, le=1000, description="Qwen3-TTS: top-k of the residual codebooks (default 50)."
    )
    subtalker_top_p: float | None = Field(
        None, gt=0, le=1.0, description="Qwen3-TTS: nucleus sampling of the residual codebooks (default 1.0)."
    )
    max_new_tokens: int | None = Field(
        None, ge=2, le=20_000,
        description="Qwen3-TTS: bound on the audio frames (12.5 per second) of one generation "
        "(default and ceiling POLYTTS_QWEN_MAX_TOKENS).",
    )  # fmt: skip
    non_streaming_mode: bool | None = Field(
        None, description="Qwen3-TTS: read the whole text before speaking (default false: text fed in as it speaks)."
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
