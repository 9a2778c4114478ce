"""The speech request of the service: what the native front takes as it is, and what every other front translates
its own request into (`TTSRequest`), with the options and messages of a live request.

The speech request's engine parameters come from the engine families (`EngineSpec.params`): each field is declared
once, with its range and default, in its engine's module.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from audio.encoding import AudioFormat
from audio.word_timings import CaptionFormat
from engines import ENGINE_SPECS


def _comma_separated(value: Any) -> Any:
    """A list given as one text (a query string's): its comma-separated items."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class VoiceFields(BaseModel):
    """Who speaks and how: what every speech route takes besides its text (the engine's parameters are added from
    the engine families)."""

    model_config = ConfigDict(extra="forbid")

    voice_id: str | None = Field(
        None,
        validation_alias=AliasChoices("voice_id", "voice"),
        description="A registered voice id, a built-in voice name or a Kokoro blend; the server default when omitted.",
    )
    language: str | None = Field(
        None,
        description="ISO code, locale or English name, e.g. 'en', 'en-GB', 'Japanese'; when omitted, the voice's own "
        "(a Kokoro voice's from its name, a registered voice's from its registration), else American English.",
    )

    lexicons: Annotated[list[str], BeforeValidator(_comma_separated)] | None = Field(
        None,
        max_length=64,
        description="Ids of stored pronunciation lexicons (`POST /lexicons`) to pronounce the text with, the first "
        "that says a word winning; then the API key's and the node's defaults. In a query string: comma-separated.",
    )


class SpeechFields(VoiceFields):
    """The fields of `POST /tts` and `POST /tts/stream` that every engine takes."""

    text: str = Field(
        description="Text to speak. Longer than POLYTTS_MAX_TEXT_CHARS once normalized is a 413; text with nothing "
        "to speak (no letter, digit or symbol) a 422 `empty_text`.",
        # Documented, not validated here: the lifecycle refuses it with its own codes (empty_text, text_too_long),
        # and the schema's maxLength is the node's setting (api_docs.install).
        json_schema_extra={"minLength": 1},
    )
    max_chars_per_gen: int | None = Field(
        None,
        ge=0,
        le=100_000,
        strict=True,
        description="Cap on the characters of one generation; 0 is unlimited (engine default).",
    )
    max_sentences_per_gen: int | None = Field(
        None,
        ge=0,
        le=1_000,
        strict=True,
        description="Cap on the sentences of one generation; 0 is unlimited (engine default).",
    )
    format: AudioFormat | CaptionFormat | None = Field(
        None,
        description="Audio format: wav (the default of /tts), pcm (raw s16le, the default of /tts/stream), mp3, opus "
        "(Ogg), aac (ADTS) or flac; on /tts also vtt or srt: captions timed by word (Kokoro voices).",
    )
    timestamps: bool = Field(
        False,
        description="/tts only (Kokoro voices): answer JSON with the audio (base64, in `format`) and `words`, each "
        "{word, start, end} in seconds of the audio.",
    )


def _engine_fields(numbers_as_text: bool = False) -> dict[str, Any]:
    """Every family's parameter as an optional request field: omitted means the engine's default. A name that
    several families declare keeps its range only where they agree (each family still checks its own).

    Numbers are strict as the families declare them (a JSON number: neither true nor "1.5"), except that with
    `numbers_as_text` (options that may come from a query string, where every value is text) text is read too.
    """
    declared: dict[str, list[FieldInfo]] = {}
    for spec in ENGINE_SPECS:
        for name, info in spec.params.model_fields.items():
            declared.setdefault(name, []).append(info)
    fields: dict[str, Any] = {}
    for name, infos in declared.items():
        first = infos[0]
        agreed = all(info.annotation == first.annotation and info.metadata == first.metadata for info in infos)
        strict = all(Strict() in info.metadata for info in infos)
        metadata = [m for m in first.metadata if m != Strict()] if agreed else []
        if strict:
            metadata.append(BeforeValidator(_not_bool) if numbers_as_text else Strict())
        annotation: Any = first.annotation
        if metadata:
            annotation = Annotated[annotation, *metadata]
        description = " ".join(info.description or "" for info in infos).strip()
        # Optional[] wraps any annotation object; `X | None` only takes classes and typing forms.
        fields[name] = (Optional[annotation], Field(None, description=description))  # noqa: UP045
    return fields


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value


TTSRequest = create_model(
    "TTSRequest",
    __base__=SpeechFields,
    __doc__="Body of `POST /tts` and `POST /tts/stream`.",
    **_engine_fields(),
)


class LiveFields(VoiceFields):
    """The options of a live request (`/tts/live`, `/tts/live/ws`): in the query string, or its first message."""

    format: AudioFormat | None = Field(
        None, description="Audio format (raw s16le pcm by default), as on the speech routes."
    )


LiveOptions = create_model(
    "LiveOptions",
    __base__=LiveFields,
    __doc__="The options of a live request: voice, language, format and the engine's parameters.",
    **_engine_fields(numbers_as_text=True),
)


MAX_LIVE_MESSAGE_CHARS = 65_536


def _within_live_message(text: str) -> str:
    """The cap on one live message's text, checked here rather than by pydantic's `max_length` (which refuses a lone
    surrogate as a malformed message), so that the live text's cleaning refuses it with the code every route answers
    (`invalid_text`, text.cleaning)."""
    if len(text) > MAX_LIVE_MESSAGE_CHARS:
        raise PydanticCustomError(
            "string_too_long",
            "String should have at most {max_length} characters",
            {"max_length": MAX_LIVE_MESSAGE_CHARS},
        )
    return text


class LiveMessage(BaseModel):
    """One message of a live request: text to append, or a flush (speak what is pending now)."""

    model_config = ConfigDict(extra="forbid")

    text: (
        Annotated[
            str,
            AfterValidator(_within_live_message),
            WithJsonSchema({"type": "string", "maxLength": MAX_LIVE_MESSAGE_CHARS}),
        ]
        | None
    ) = Field(None, description="Text to append.")
    flush: bool = Field(False, description="Speak what is pending now, even an unfinished phrase.")
    end: bool = Field(
        False,
        description="The text is complete: the rest is spoken, then the request ends (the end of an HTTP body "
        "says the same).",
    )
