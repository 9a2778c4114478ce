"""Request and response models of the native HTTP API.

The speech request's engine parameters come from the engine families (`EngineSpec.params`): each field is declared
once, with its range and default, in its engine's module.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

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
from engines import ENGINE_SPECS, FAMILIES
from gpu.engine_pool import EngineStatus
from voicebank.registration import MAX_REF_TEXT_CHARS


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


# Documentation only: the route reads the form part by part as it arrives (routes.voices.registration_from_form).
class VoiceForm(BaseModel):
    """The multipart form of `POST /voices`: a reference clip (`audio`) and its engine, or a Kokoro `voice_pack`."""

    audio: bytes | None = Field(
        None,
        description="Reference clip, any format libsndfile decodes, 0.5-60 s, at most POLYTTS_MAX_UPLOAD_BYTES; "
        "a file part. One of audio or voice_pack is required.",
    )
    voice_pack: bytes | None = Field(
        None,
        description="Kokoro only, instead of audio: one float tensor of shape (510, 1, 256) as .pt, .npy, "
        ".npz or .safetensors; a file part.",
    )
    # A Literal of the families' names, built at import time: pydantic reads it, a type checker cannot.
    engine: Literal[tuple(FAMILIES)] = Field(  # type: ignore[valid-type]
        description="The engine the voice is for (kokoro takes a voice_pack, the others a clip)."
    )
    ref_text: str | None = Field(
        None, max_length=MAX_REF_TEXT_CHARS, description="The clip's transcript; required unless x_vector_only_mode."
    )
    x_vector_only_mode: bool = Field(False, description="Clone timbre only: no transcript needed.")
    seed_audio: bytes | None = Field(None, description="An optional tone seed clip (a file part).")
    seed_text: str | None = Field(None, description="The seed clip's text; required with seed_audio.")
    replace: bool = Field(False, description="Replace the transcript of a voice already registered under this id.")
    language: str | None = Field(
        None,
        description="The language the voice speaks (ISO code, locale or English name); a request that names "
        "none follows it.",
    )


class WordTimingView(BaseModel):
    word: str
    start: float = Field(description="Seconds from the start of the audio.")
    end: float


class TimedSpeech(BaseModel):
    """`POST /tts` with `timestamps`: the audio and when each word is spoken."""

    audio: str = Field(description="The audio in `format`, base64.", json_schema_extra={"contentEncoding": "base64"})
    format: AudioFormat
    sample_rate: int
    words: list[WordTimingView]


NodeStatus = Literal["ready", "warming", "failed", "draining"]
"""Whether the node takes work: that of its default engine, or draining before a stop."""


class ReadyState(BaseModel):
    status: NodeStatus
    reason: str | None = Field(
        None, description="Why not ready; left out for a caller without a key on a node with keys."
    )


class VoiceCreated(BaseModel):
    voice_id: str
    created: bool
    """False when the same registration already existed and nothing was written."""


class UnloadResult(BaseModel):
    unloaded: list[str]


class EngineDescription(BaseModel):
    """One engine this node runs, as `GET /engines` describes it."""

    name: str
    state: EngineStatus
    sample_rate: int = Field(description="The sample rate of its audio, in Hz.")
    clone: bool = Field(description="Whether it clones a voice from a registered clip.")
    packs: bool = Field(description="Whether it takes uploaded voice packs.")
    live: bool = Field(description="Whether it speaks on the live routes (`/tts/live`, `/tts/live/ws`).")
    parameters: dict[str, Any] = Field(
        description="JSON schema of its per-request parameters: each one's type, range, default and description."
    )


class LanguageDescription(BaseModel):
    code: str = Field(description="The canonical code, e.g. 'en-gb'; a request may also use an alias or the name.")
    name: str = Field(description="The language in English, e.g. 'British English'.")


class EngineCatalog(BaseModel):
    """`GET /engines`: what this node's engines take, and the languages a request may name."""

    engines: list[EngineDescription]
    languages: list[LanguageDescription]


# -- GET /health: returned as built (lifecycle.service), these models document it ---------------------------------


class EngineHealth(BaseModel):
    """One engine as `/health` shows it to a caller with a key: its family's own description (backend, device,
    checkpoint, memory, ...), then its state."""

    state: EngineStatus
    reason: str | None = Field(description="Why it failed to load, if it did.")


class ResidentEngine(BaseModel):
    engine: str
    checkpoint: str | None


class FleetState(BaseModel):
    attached: bool = Field(description="Whether a fleet broker manages this node.")
    residency: str = Field(description="Who decides which engines stay in device memory: `local`, or the fleet.")


class HealthLimits(BaseModel):
    max_inflight: int
    max_queued_chars: int
    max_text_chars: int
    max_upload_bytes: int


class Inventory(BaseModel):
    voice: list[str] = Field(description="Registered voices of engines this node runs, then every built-in voice.")


class VoiceCounts(BaseModel):
    registered: int
    by_engine: dict[str, int]
    ids: list[str]
    builtin: list[str]


class CacheStats(BaseModel):
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int


class CacheLayers(BaseModel):
    wav: CacheStats = Field(description="The in-memory cache (POLYTTS_MEMORY_CACHE_BYTES).")
    pcm: CacheStats = Field(description="The disk cache (POLYTTS_PCM_CACHE_BYTES).")


class Health(BaseModel):
    """`GET /health` for a caller with a key, or on a node without keys."""

    status: NodeStatus
    reason: str | None = Field(description="Why the node is not ready, if it is not.")
    pid: int
    uptime_s: float
    device: str = Field(description="Where the default engine runs.")
    default_engine: str
    runtime: str
    serves: list[str] = Field(description="The engines this node runs.")
    engines: dict[str, EngineHealth]
    resident: list[ResidentEngine] = Field(description="The engines in device memory now.")
    manager: dict[str, Any] = Field(description="The residency manager's state: its policy and each engine's loads.")
    fleet: FleetState
    inflight: dict[str, Any] = Field(
        description="The fair queue: syntheses running and waiting, rejections, real-time streams, per engine and key."
    )
    limits: HealthLimits
    inventory: Inventory
    voices: VoiceCounts
    caches: CacheLayers


class PublicEngine(BaseModel):
    state: EngineStatus


class PublicLoad(BaseModel):
    running: int
    waiting: int
    in_flight: int = Field(description="Requests admitted or served from a cache, not ended yet.")


class PublicHealth(BaseModel):
    """`GET /health` for a caller without a key on a node with keys: what a balancer or a broker needs."""

    status: NodeStatus
    engines: dict[str, PublicEngine]
    load: PublicLoad
    inventory: Inventory | None = Field(None, description="Only where POLYTTS_PUBLIC_INVENTORY publishes it.")
