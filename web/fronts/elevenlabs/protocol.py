"""ElevenLabs' text-to-speech API as PolyTTS speaks it, without a web framework: request bodies and WebSocket messages,
`output_format` names, model ids, character alignments from word timings, voices, and the error body.

Shapes follow ElevenLabs' API reference and the official `elevenlabs` package (requirements-dev.txt pins the version
the tests drive the routes with); Pipecat's and LiveKit's ElevenLabs services read the same shapes.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from audio.encoding import MEDIA_TYPES
from audio.output import G711_MEDIA_TYPES, Output
from audio.word_timings import Words, WordTiming
from engines.base import BuiltinVoice
from errors import InvalidInput, ServiceError
from lifecycle.speech import Speech
from voicebank.voice_entry import VoiceEntry
from web.fronts.shared.model_ids import model_engine

PREFIX = "/elevenlabs"
"""Where the front lives: a client's base URL is `http://<node>/elevenlabs`, and it appends `/v1/...` itself."""

DEFAULT_OUTPUT_FORMAT = "mp3_44100_128"
_MP3_RATES = (22050, 24000, 44100)
_BIT_RATES = (32, 64, 96, 128, 192)
_PCM_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
OUTPUT_FORMATS: tuple[str, ...] = (
    *(f"pcm_{rate}" for rate in _PCM_RATES),
    "ulaw_8000",
    "alaw_8000",
    *(f"mp3_{rate}_{kbps}" for rate in _MP3_RATES for kbps in _BIT_RATES),
    *(f"opus_48000_{kbps}" for kbps in _BIT_RATES),
)
"""Every `output_format` answered: raw s16le PCM, μ-law and A-law at their rate, MP3 and Ogg Opus at a rate and bit
rate."""
_FORMAT = re.compile(r"(pcm|ulaw|alaw|mp3|opus)_(\d+)(?:_(\d+))?")


def output(name: str | None) -> Output:
    """The audio an `output_format` names; an unknown name is a 422 that lists the ones answered."""
    found = _FORMAT.fullmatch(name or DEFAULT_OUTPUT_FORMAT)
    if found is None or found.group(0) not in OUTPUT_FORMATS:
        raise InvalidInput(
            f"output_format {str(name)[:40]!r} is not one this node answers; one of {', '.join(OUTPUT_FORMATS)}",
            code="invalid_output_format",
            detail={"param": "output_format"},
        )
    kind, rate, kbps = found.group(1), int(found.group(2)), found.group(3)
    if kind == "pcm":
        return Output("pcm", rate)
    if kind in ("ulaw", "alaw"):
        return Output("pcm", rate, encoding="mulaw" if kind == "ulaw" else "alaw")
    return Output("mp3" if kind == "mp3" else "opus", rate, bit_rate=int(kbps) * 1000)


def media_type(audio: Output) -> str:
    """Always an `audio/` type, as ElevenLabs answers: LiveKit's plugin refuses any other as not audio."""
    if audio.encoding in G711_MEDIA_TYPES:
        return G711_MEDIA_TYPES[audio.encoding]
    return "audio/pcm" if audio.fmt == "pcm" else MEDIA_TYPES[audio.fmt]


def resolve_model(model_id: str | None, engines: Collection[str]) -> str | None:
    """The engine a `model_id` asks for: ElevenLabs' models (`eleven_...`) mean the voice's own engine (None); a
    PolyTTS engine name means that engine, whose voice the path must name."""
    return model_engine(model_id, engines, "eleven_")


class VoiceSettings(BaseModel):
    """`voice_settings`: `speed` is the engine's speaking rate; the others shape ElevenLabs' own models and are
    ignored (named in X-Ignored-Parameters)."""

    model_config = ConfigDict(extra="allow")

    speed: float | None = Field(None, ge=0.25, le=4.0, description="Speaking rate (1 is the voice's own pace).")
    stability: float | None = Field(None, description="Ignored.")
    similarity_boost: float | None = Field(None, description="Ignored.")
    style: float | None = Field(None, description="Ignored.")
    use_speaker_boost: bool | None = Field(None, description="Ignored.")

    def ignored(self) -> list[str]:
        given = self.model_dump(exclude_none=True)
        return [
            f"voice_settings.{name}"
            for name in ("stability", "similarity_boost", "style", "use_speaker_boost")
            if name in given
        ]


IGNORED_FIELDS = (
    "previous_text",
    "next_text",
    "previous_request_ids",
    "next_request_ids",
    "seed",
    "apply_text_normalization",
    "apply_language_text_normalization",
    "use_pvc_as_ivc",
    "audio_effects",
)
"""Fields of ElevenLabs' request that shape its own models: accepted, unused, named in X-Ignored-Parameters."""


class Locator(BaseModel):
    """ElevenLabs' `PronunciationDictionaryVersionLocator`: a dictionary of its pronunciation-dictionary API, and a
    version of it (its latest when omitted)."""

    pronunciation_dictionary_id: str = Field(min_length=1, max_length=64)
    version_id: str | None = Field(None, max_length=64)


class SpeechBody(BaseModel):
    """Body of `POST .../v1/text-to-speech/{voice_id}` and its `/stream` and `/with-timestamps` forms. Fields this
    node does not use are accepted, ignored and named in the answer's X-Ignored-Parameters."""

    model_config = ConfigDict(extra="allow")

    text: str = Field(description="Text to speak.", json_schema_extra={"minLength": 1})
    model_id: str | None = Field(None, description="`eleven_...` (the voice's engine) or a PolyTTS engine name.")
    language_code: str | None = Field(None, description="ISO 639-1 code; the voice's own language when omitted.")
    voice_settings: VoiceSettings | None = None
    pronunciation_dictionary_locators: list[Locator] | None = Field(
        None, max_length=8, description="Dictionaries (`.../v1/pronunciation-dictionaries`) to pronounce the text with."
    )
    previous_text: str | None = Field(None, description="Ignored: every request is spoken on its own.")
    next_text: str | None = Field(None, description="Ignored.")

    def speed(self) -> float | None:
        speed = self.voice_settings.speed if self.voice_settings else None
        return speed if speed != 1.0 else None  # 1 is every engine's pace; another one goes to the engine

    def ignored(self) -> list[str]:
        """ElevenLabs' own fields that were given and are not used (any other field is ignored unnamed)."""
        given = self.model_dump(exclude_none=True)
        names = [name for name in IGNORED_FIELDS if name in given]
        return names + (self.voice_settings.ignored() if self.voice_settings else [])


# --- alignment ----------------------------------------------------------------------------------------------------


def characters(words: Sequence[WordTiming], start: float, lead_space: bool) -> list[tuple[str, float, float]]:
    """Each character of the words (joined by single spaces) with its start and end in seconds: a word's letters
    share its span evenly, a space spans the gap before the next word (from `start` for a leading one)."""
    out: list[tuple[str, float, float]] = []
    previous_end = start
    for index, word in enumerate(words):
        if index or lead_space:
            out.append((" ", previous_end, max(previous_end, word.start)))
        step = (word.end - word.start) / max(1, len(word.word))
        out += [(char, word.start + i * step, word.start + (i + 1) * step) for i, char in enumerate(word.word)]
        previous_end = word.end
    return out


def alignment(words: Sequence[WordTiming], lead_space: bool) -> dict[str, Any] | None:
    """The HTTP routes' `alignment`: characters with their times in seconds from the start of the audio."""
    chars = characters(words, words[0].start if words else 0.0, lead_space)
    if not chars:
        return None
    return {
        "characters": [char for char, _, _ in chars],
        "character_start_times_seconds": [round(begin, 3) for _, begin, _ in chars],
        "character_end_times_seconds": [round(end, 3) for _, _, end in chars],
    }


def socket_alignment(words: Sequence[WordTiming], start: float, end: float, origin: float) -> dict[str, Any] | None:
    """The WebSocket's `alignment` of a phrase's audio, from `start` to `end` seconds of the stream: its words'
    characters, then a space lasting to `end` (the silence that ends the phrase), so that a client that splits
    words at spaces (Pipecat, LiveKit) has the phrase's last word with it; times in milliseconds from `origin`. With
    `origin` the start of that audio (ElevenLabs' reference: times are relative to the chunk), a client adding up
    each message's span (as Pipecat does) keeps time with the audio; with `origin` 0 the times are on the context's
    clock, where LiveKit places them."""
    chars = characters(words, start, lead_space=False)
    if not chars:
        return None
    chars.append((" ", chars[-1][2], max(chars[-1][2], end)))
    starts = [round((begin - origin) * 1000) for _, begin, _ in chars]
    ends = [round((stop - origin) * 1000) for _, _, stop in chars]
    return {
        "chars": [char for char, _, _ in chars],
        "charStartTimesMs": starts,
        "charDurationsMs": [max(0, stop - begin) for begin, stop in zip(starts, ends, strict=True)],
    }


class Alignment(BaseModel):
    characters: list[str]
    character_start_times_seconds: list[float]
    character_end_times_seconds: list[float]


class TimedAudio(BaseModel):
    """One answer of `/with-timestamps` (one line of `/stream/with-timestamps`): audio in `output_format`, base64,
    and the characters it speaks; `normalized_alignment` is the same (the words as written)."""

    audio_base64: str
    alignment: Alignment | None = None
    normalized_alignment: Alignment | None = None


@dataclass(frozen=True)
class Segment:
    """Audio in the asked format with the words it speaks, from `start` to `end` seconds of the response."""

    audio: bytes
    words: list[WordTiming]
    start: float
    end: float


async def segments(speech: Speech, audio: Output, hold: bool) -> AsyncIterator[Segment]:
    """The answer's audio and the words it speaks. With `hold`, a timed chunk's audio waits for its words, so each
    segment carries both (one JSON line per chunk); without, audio goes as it comes and each chunk's words follow
    as a segment of their own (the words of a live request's phrase may come only when its job next runs, which
    must not delay its audio). What the encoder still holds at the end comes last, without words."""
    pending: list[bytes] = []
    start = 0.0
    async with contextlib.aclosing(speech.encoded_events(audio)) as events:
        async for item in events:
            if isinstance(item, Words):
                if not item.words and not pending:  # the end of an untimed chunk
                    continue
                end = speech.timings.audio_seconds()
                yield Segment(b"".join(pending), item.words, start, end)
                pending, start = [], end
            elif hold and speech.plan.timed:
                pending.append(item)
            elif item:
                yield Segment(item, [], start, speech.timings.audio_seconds())
    if pending and (tail := b"".join(pending)):
        yield Segment(tail, [], start, speech.timings.audio_seconds())


# --- WebSocket messages -------------------------------------------------------------------------------------------


class GenerationConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    chunk_length_schedule: list[Annotated[int, Field(ge=50, le=500)]] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Characters of text (50 to 500 each) a phrase waits for at most: the first value the first "
        "phrase's, the last every later phrase's (ElevenLabs repeats its last value). A phrase's end (a sentence, a "
        "clause) still cuts it earlier, and no phrase is longer than the engine allows. Smaller values start the "
        "audio after fewer characters of unpunctuated text.",
    )

    def phrase_chars(self) -> tuple[int, int] | None:
        """The schedule as the live segmenter's (first, every later) phrase caps. The segmenter takes a first
        phrase whole up to twice its cap (text/chunking.py `_caps`), so half the first value makes the first phrase
        wait for at most that many characters. ElevenLabs' default schedule, [120, 160, 250, 290], comes to the
        node's own caps at their defaults (POLYTTS_FIRST_CHUNK_CHARS 60, the engine's 120)."""
        schedule = self.chunk_length_schedule
        if not schedule:
            return None
        return math.ceil(schedule[0] / 2), schedule[-1]


class SocketMessage(BaseModel):
    """One client message of `stream-input` and `multi-stream-input`; fields this node does not use are ignored."""

    model_config = ConfigDict(extra="allow")

    text: str | None = Field(None, max_length=65_536)
    flush: bool = False
    voice_settings: VoiceSettings | None = None
    generation_config: GenerationConfig | None = None
    context_id: str | None = Field(None, min_length=1, max_length=128)
    pronunciation_dictionary_locators: list[Locator] | None = Field(None, max_length=8)
    close_context: bool = False
    close_socket: bool = False


# --- voices and models --------------------------------------------------------------------------------------------


def voice_view(voice: BuiltinVoice | VoiceEntry) -> dict[str, Any]:
    """One voice in ElevenLabs' `Voice` shape: built-in voices are `premade`, registered ones `cloned`."""
    builtin = isinstance(voice, BuiltinVoice)
    voice_id = voice.name if isinstance(voice, BuiltinVoice) else voice.voice_id
    language = voice.language
    return {
        "voice_id": voice_id,
        "name": voice_id,
        "category": "premade" if builtin else "cloned",
        "labels": {"engine": voice.engine, **({"language": language} if language else {})},
        "description": None,
        "preview_url": None,
        "available_for_tiers": [],
        "settings": None,
        "high_quality_base_model_ids": [],
    }


def voices_list(voices: Iterable[BuiltinVoice | VoiceEntry]) -> dict[str, Any]:
    return {"voices": [voice_view(voice) for voice in voices]}


class VoicesSearch(BaseModel):
    """The query of `GET .../v2/voices`: a page of voices, filtered; filters of ElevenLabs' own library (`sort`,
    `collection_id`, `fine_tuning_state`, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    page_size: int = Field(10, ge=1, le=100, description="Voices on a page.")
    next_page_token: str | None = Field(None, max_length=32, description="From the previous page's answer.")
    search: str | None = Field(None, max_length=256, description="Only voices whose id or labels contain this.")
    category: str | None = Field(None, description="`premade` (built-in voices) or `cloned` (registered ones).")
    voice_type: str | None = Field(None, description="`default` (built-in voices), `personal` (registered ones).")
    voice_ids: list[str] | None = Field(None, max_length=100, description="Only these voices.")
    include_total_count: bool = True

    def page(self, voices: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """The page of `voices` (each a `voice_view`) this asks for; `next_page_token` is where the next one starts."""
        wanted = {"default": "premade", "personal": "cloned", "non-default": "cloned"}.get(self.voice_type or "")
        found = [
            voice
            for voice in voices
            if (self.search is None or self.search.lower() in f"{voice['voice_id']} {voice['labels']}".lower())
            and (self.category is None or voice["category"] == self.category)
            and (wanted is None or voice["category"] == wanted)
            and (self.voice_ids is None or voice["voice_id"] in self.voice_ids)
        ]
        token = self.next_page_token or ""
        start = int(token) if token.isdigit() else 0
        end = start + self.page_size
        more = end < len(found)
        return {
            "voices": found[start:end],
            "has_more": more,
            "total_count": len(found),
            "next_page_token": str(end) if more else None,
        }


def models_list(engines: Iterable[str]) -> list[dict[str, Any]]:
    """`GET .../v1/models`: one model per engine, each speaking its own voices."""
    return [
        {
            "model_id": name,
            "name": name,
            "can_do_text_to_speech": True,
            "can_use_speaker_boost": False,
            "can_use_style": False,
            "description": "A PolyTTS engine; ElevenLabs model ids (eleven_...) mean the voice's own engine.",
        }
        for name in sorted(engines)
    ]


# --- errors -------------------------------------------------------------------------------------------------------


class ElevenLabsErrorDetail(BaseModel):
    status: str = Field(description="Our stable code, e.g. `voice_not_found`, `invalid_output_format`.")
    message: str


class ElevenLabsErrorBody(BaseModel):
    """The body of every error the ElevenLabs routes answer: `{"detail": {"status", "message"}}`."""

    detail: ElevenLabsErrorDetail


def error_body(exc: ServiceError) -> dict[str, Any]:
    return {"detail": {"status": exc.code, "message": exc.message}}


def socket_error(exc: ServiceError, context_id: str | None) -> dict[str, Any]:
    """An error message on the WebSocket, as ElevenLabs sends them (`message`, `error`), with our code."""
    return {"message": exc.message, "error": exc.code, **({"contextId": context_id} if context_id else {})}
