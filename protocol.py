"""Request and response models of the native HTTP API.

The speech request's engine parameters come from the engine families (`EngineSpec.params`): each field is declared
once, with its range and default, in its engine's module.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from audio import AudioFormat
from engines import ENGINE_SPECS


class SpeechFields(BaseModel):
    """The fields of `POST /tts` and `POST /tts/stream` that every engine takes."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="Text to speak. Longer than POLYTTS_MAX_TEXT_CHARS is a 413.")
    voice_id: str | None = Field(
        None,
        validation_alias=AliasChoices("voice_id", "voice"),
        description="A registered voice id, a built-in voice name or a Kokoro blend; the server default when omitted.",
    )
    language: str | None = Field(None, description="ISO code, locale or English name, e.g. 'en', 'en-GB', 'Japanese'.")
    max_chars_per_gen: int | None = Field(
        None, ge=0, le=100_000, description="Cap on the characters of one generation; 0 is unlimited (engine default)."
    )
    max_sentences_per_gen: int | None = Field(
        None, ge=0, le=1_000, description="Cap on the sentences of one generation; 0 is unlimited (engine default)."
    )
    format: AudioFormat | None = Field(
        None,
        description="Audio format: wav (the default of /tts), pcm (raw s16le, the default of /tts/stream), mp3, opus "
        "(Ogg), aac (ADTS) or flac.",
    )


def _engine_fields() -> dict[str, Any]:
    """Every family's parameter as an optional request field: omitted means the engine's default. A name that
    several families declare keeps its range only where they agree (each family still checks its own)."""
    declared: dict[str, list[FieldInfo]] = {}
    for spec in ENGINE_SPECS:
        for name, info in spec.params.model_fields.items():
            declared.setdefault(name, []).append(info)
    fields: dict[str, Any] = {}
    for name, infos in declared.items():
        first = infos[0]
        agreed = all(info.annotation == first.annotation and info.metadata == first.metadata for info in infos)
        annotation = first.annotation
        if agreed and first.metadata:
            annotation = Annotated[annotation, *first.metadata]
        description = " ".join(info.description or "" for info in infos).strip()
        fields[name] = (Optional[annotation], Field(None, description=description))  # noqa: UP045 - a runtime type
    return fields


TTSRequest = create_model(  # type: ignore[call-overload]
    "TTSRequest",
    __base__=SpeechFields,
    __doc__="Body of `POST /tts` and `POST /tts/stream`.",
    **_engine_fields(),
)

ENGINE_PARAMS: tuple[str, ...] = tuple(name for name in TTSRequest.model_fields if name not in SpeechFields.model_fields)
"""Request fields that are generation parameters of some engine family; another family's is a 422."""


class VoiceCreated(BaseModel):
    voice_id: str
    created: bool
    """False when the same registration already existed and nothing was written."""


class UnloadResult(BaseModel):
    unloaded: list[str]
