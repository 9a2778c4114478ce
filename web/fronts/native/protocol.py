"""Answers of the native speech API beside its audio: the timed answer of `POST /tts` and what `GET /engines`
says of each engine. Its requests are the service's own (web/fronts/shared/requests.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from audio.encoding import AudioFormat
from gpu.engine_pool import EngineStatus


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
