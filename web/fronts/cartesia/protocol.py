"""Cartesia's text-to-speech API as PolyTTS speaks it, without a web framework: request bodies and WebSocket messages,
`output_format`, model ids, word timestamps and the error bodies.

Shapes follow Cartesia's API reference and the official `cartesia` package (requirements-dev.txt pins the version the
tests drive the routes with); Pipecat's and LiveKit's Cartesia services read the same shapes.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from audio.output import Output, SampleEncoding
from audio.word_timings import WordTiming
from engines.base import BuiltinVoice
from errors import InvalidInput, ServiceError
from lifecycle.request_context import REQUEST_ID
from voicebank.voice_entry import VoiceEntry
from web.fronts.shared.model_ids import model_engine

PREFIX = "/cartesia"
"""Where the front lives: a client's base URL is `http://<node>/cartesia` (its WebSocket URL
`ws://<node>/cartesia/tts/websocket`), and it appends `/tts/...` itself."""

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
BIT_RATES = (32000, 64000, 96000, 128000, 192000)
Encoding = Literal["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"]
_ENCODINGS: dict[str, SampleEncoding] = {
    "pcm_s16le": "s16le",
    "pcm_f32le": "f32le",
    "pcm_mulaw": "mulaw",
    "pcm_alaw": "alaw",
}
SPEEDS = {"slow": 0.8, "normal": 1.0, "fast": 1.25}
"""The speaking rate each of Cartesia's named `speed` values means here."""


class OutputFormat(BaseModel):
    """`output_format`: `raw` samples or a `wav` file (`encoding` at `sample_rate`), or `mp3` at a `bit_rate`."""

    model_config = ConfigDict(extra="allow")

    container: Literal["raw", "wav", "mp3"]
    encoding: Encoding | None = Field(None, description="How `raw` and `wav` samples are written.")
    sample_rate: int = Field(description=f"One of {', '.join(map(str, SAMPLE_RATES))}.")
    bit_rate: int | None = Field(None, description=f"For `mp3`: one of {', '.join(map(str, BIT_RATES))} (bit/s).")

    def output(self, containers: Collection[str]) -> Output:
        """The audio this asks for, where the route answers its container; else a 422 that says what is answered."""
        if self.container not in containers:
            raise _bad_format(f"container {self.container!r} is not answered here; one of {', '.join(containers)}")
        if self.sample_rate not in SAMPLE_RATES:
            raise _bad_format(f"sample_rate {self.sample_rate} is not one of {', '.join(map(str, SAMPLE_RATES))}")
        if self.container == "mp3":
            if self.bit_rate is not None and self.bit_rate not in BIT_RATES:
                raise _bad_format(f"bit_rate {self.bit_rate} is not one of {', '.join(map(str, BIT_RATES))}")
            return Output("mp3", self.sample_rate, bit_rate=self.bit_rate or 128000)
        if self.encoding is None:
            raise _bad_format(f"a {self.container} output_format needs an encoding: one of {', '.join(_ENCODINGS)}")
        return Output("pcm" if self.container == "raw" else "wav", self.sample_rate, _ENCODINGS[self.encoding])


def _bad_format(message: str) -> InvalidInput:
    return InvalidInput(f"output_format: {message}", code="invalid_output_format", detail={"param": "output_format"})


class VoiceSpecifier(BaseModel):
    """`voice`: `{"mode": "id", "id": ...}` (or a bare id string, which the bodies accept as well)."""

    model_config = ConfigDict(extra="allow")

    mode: Literal["id", "embedding"] = "id"
    id: str | None = Field(None, min_length=1, max_length=256)

    def voice_id(self) -> str:
        if self.mode != "id" or self.id is None:
            raise InvalidInput(
                'voice: only {"mode": "id", "id": ...} is answered here (a built-in voice, a blend or a registered '
                "voice id); embeddings are not",
                code="unsupported_voice_mode",
                detail={"param": "voice"},
            )
        return self.id


class GenerationConfig(BaseModel):
    """`generation_config`: `speed` is the engine's speaking rate; `volume` and `emotion` shape Cartesia's own models
    and are ignored (named in X-Ignored-Parameters)."""

    model_config = ConfigDict(extra="allow")

    speed: float | None = Field(None, ge=0.25, le=4.0, description="Speaking rate (1 is the voice's own pace).")
    volume: float | None = Field(None, description="Ignored.")
    emotion: Any = Field(None, description="Ignored.")


IGNORED_FIELDS = ("add_phoneme_timestamps", "duration", "save", "normalization")
"""Fields of Cartesia's request that shape its own models or account: accepted, unused, named in
X-Ignored-Parameters."""


class GenerationFields(BaseModel):
    """What every Cartesia request carries: who speaks, what, how fast, and in what audio. Fields this node does not
    use are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model_id: str | None = Field(None, description="`sonic...` (the voice's engine) or a PolyTTS engine name.")
    transcript: str = Field(
        "",
        description="Text to speak; longer than POLYTTS_MAX_TEXT_CHARS is a 413, nothing to speak a 422 `empty_text`.",
        json_schema_extra={"minLength": 1},
    )
    voice: VoiceSpecifier | str
    output_format: OutputFormat
    language: str | None = Field(None, description="ISO 639-1 code; the voice's own language when omitted.")
    locale: str | None = Field(None, description="The same as `language` (for example `en-GB`).")
    speed: Literal["slow", "normal", "fast"] | None = Field(None, description="slow 0.8, fast 1.25.")
    generation_config: GenerationConfig | None = None
    add_timestamps: bool | None = Field(None, description="Word timestamps (`timestamps` events).")
    use_normalized_timestamps: bool | None = Field(None, description="Accepted: the words are always as written.")
    pronunciation_dict_id: str | None = Field(
        None, max_length=64, description="A pronunciation dictionary (`.../pronunciation-dicts`) or a stored lexicon."
    )

    def voice_id(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.voice_id()

    def speaking_rate(self) -> float | None:
        config = self.generation_config.speed if self.generation_config else None
        rate = config if config is not None else SPEEDS[self.speed] if self.speed else None
        return rate if rate != 1.0 else None  # 1 is every engine's pace; another one goes to the engine

    def spoken_language(self) -> str | None:
        return self.language or self.locale

    def ignored(self) -> list[str]:
        given = self.model_dump(exclude_none=True)
        names = [name for name in IGNORED_FIELDS if name in given]
        config = self.generation_config.model_dump(exclude_none=True) if self.generation_config else {}
        return names + [f"generation_config.{name}" for name in ("volume", "emotion") if name in config]


class GenerationRequest(GenerationFields):
    """Body of `POST .../tts/bytes` and `POST .../tts/sse`."""

    context_id: str | None = Field(None, max_length=128, description="Echoed in the SSE events.")


class SocketMessage(GenerationFields):
    """One generation request of `.../tts/websocket`: text for a context (`continue`: more will follow), a `flush`,
    or a `cancel`. The first message of a context fixes its voice, format and timestamps."""

    transcript: str = Field("", max_length=65_536)
    voice: VoiceSpecifier | str | None = None  # type: ignore[assignment]  # a cancel names none
    output_format: OutputFormat | None = None  # type: ignore[assignment]
    context_id: str | None = Field(None, min_length=1, max_length=128)
    continue_: bool = Field(False, alias="continue", description="More text will follow on this context.")
    flush: bool = False
    cancel: bool = False
    max_buffer_delay_ms: int | None = Field(
        None, ge=0, le=5000, description="Accepted: phrases are spoken as soon as they are complete."
    )


def resolve_model(model_id: str | None, engines: Collection[str]) -> str | None:
    """The engine a `model_id` asks for: Cartesia's models (`sonic...`) mean the voice's own engine (None); a
    PolyTTS engine name means that engine, whose voice `voice` must name."""
    return model_engine(model_id, engines, "sonic")


def word_timestamps(words: Sequence[WordTiming]) -> dict[str, list[Any]]:
    """`word_timestamps`: the words as written, with their start and end in seconds from the start of the audio."""
    return {
        "words": [word.word for word in words],
        "start": [round(word.start, 3) for word in words],
        "end": [round(word.end, 3) for word in words],
    }


class StepClock:
    """`step_time`: the milliseconds since the previous chunk (or the request's start) that its audio took."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def step_ms(self) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return round(elapsed * 1000, 1)


# --- voices -------------------------------------------------------------------------------------------------------

Gender = Literal["feminine", "masculine", "gender_neutral"]
_GENDERS: dict[str | None, Gender] = {"female": "feminine", "male": "masculine"}
_LANGUAGES = {"cmn": "zh"}
"""Our language codes that are not Cartesia's (its are ISO 639-1)."""
_BUILTIN_CREATED = datetime(2025, 1, 1, tzinfo=UTC)
"""`created_at` of a built-in voice, which has no registration time: Kokoro v1.0's release."""


class PageQuery(BaseModel):
    """The query of a Cartesia list: a page of at most `limit` items after (or before) an item's id."""

    model_config = ConfigDict(extra="allow")

    limit: int = Field(10, ge=1, le=100, description="Items on a page.")
    starting_after: str | None = Field(None, description="The page after this id.")
    ending_before: str | None = Field(None, description="The page before this id.")

    def page(self, found: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The page of `found` (each with its `id`) this asks for, with whether more follow."""
        ids = [item["id"] for item in found]
        if self.ending_before is not None:
            end = ids.index(self.ending_before) if self.ending_before in ids else 0
            start = max(0, end - self.limit)
            return {"data": list(found[start:end]), "has_more": start > 0}
        if self.starting_after is None:
            start = 0
        else:  # past an item that is gone, or not listed, nothing follows
            start = ids.index(self.starting_after) + 1 if self.starting_after in ids else len(found)
        return {"data": list(found[start : start + self.limit]), "has_more": start + self.limit < len(found)}


class VoicesQuery(PageQuery):
    """The query of `GET .../voices`: a page of the voices its filters keep."""

    q: str | None = Field(None, max_length=256, description="Only voices whose id or name contains this.")
    gender: Gender | None = None
    is_owner: bool | None = Field(None, description="Only registered voices (true) or only built-in ones (false).")

    def page(self, found: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The page of the voices (each a `voice_view`) this asks for, with whether more follow."""
        return super().page(
            [
                voice
                for voice in found
                if (self.q is None or self.q.lower() in voice["id"].lower())
                and (self.gender is None or voice.get("gender") == self.gender)
                and (self.is_owner is None or voice["is_owner"] == self.is_owner)
            ]
        )


def voice_view(voice: BuiltinVoice | VoiceEntry) -> dict[str, Any]:
    """One voice in Cartesia's `Voice` shape: built-in voices are public, registered ones the node's own."""
    builtin = isinstance(voice, BuiltinVoice)
    voice_id = voice.name if isinstance(voice, BuiltinVoice) else voice.voice_id
    tag = voice.language or "en-us"
    language = _LANGUAGES.get(tag.split("-")[0], tag.split("-")[0])
    locale = "-".join([language, *(part.upper() for part in tag.split("-")[1:])])
    created = _BUILTIN_CREATED if isinstance(voice, BuiltinVoice) else datetime.fromtimestamp(voice.created_at, UTC)
    gender = _GENDERS.get(voice.gender) if isinstance(voice, BuiltinVoice) else None
    return {
        "id": voice_id,
        "name": voice_id,
        "description": f"A {'built-in' if builtin else 'registered'} {voice.engine} voice of this node.",
        "tagline": "",
        "access": "public" if builtin else "private",
        "visibility": "all" if builtin else "owner",
        "is_owner": not builtin,
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "language": language,
        "locales": [{"locale": locale, "is_native": True}],
        **({"gender": gender} if gender else {}),
    }


def voices_list(voices: Iterable[BuiltinVoice | VoiceEntry]) -> list[dict[str, Any]]:
    return [voice_view(voice) for voice in voices]


# --- errors -------------------------------------------------------------------------------------------------------


class CartesiaErrorBody(BaseModel):
    """The body of every error the Cartesia routes answer."""

    error_code: str = Field(description="Our stable code, e.g. `voice_not_found`, `invalid_output_format`.")
    title: str = Field(description="The status's name.")
    message: str
    request_id: str = Field(description="The request's X-Request-Id.")


def error_body(exc: ServiceError) -> dict[str, Any]:
    return {
        "error_code": exc.code,
        "title": _title(exc.status),
        "message": exc.message,
        "request_id": REQUEST_ID.get() or "",
    }


def event_error(exc: ServiceError, context_id: str | None) -> dict[str, Any]:
    """An `error` event of the WebSocket and of SSE (`error` also carries the message, as older clients read it)."""
    return {
        "type": "error",
        "done": True,
        "status_code": exc.status,
        **error_body(exc),
        "error": exc.message,
        **({"context_id": context_id} if context_id is not None else {}),
    }


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
