"""`meta.json`, the description of one stored voice: what the registry writes, and what it accepts when reading back.

Two shapes share the file: a reference clip's (no `kind`, or `"kind": "clip"`) and a Kokoro voice pack's
(`"kind": "pack"`). Folders written by earlier deployments load as they are: every field but `engine` may be absent
or null, and the transcript may be named `text`. Anything else out of bounds (a wrong type, a NaN, a date centuries
away, a file too large to be one) makes the folder a damaged one, `Unusable`, never a voice. The file is written
with `json.dumps` (not pydantic's encoder), so a voice written today is byte for byte what earlier deployments wrote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from voicebank.voice_entry import META_FILE, excerpt

MAX_META_BYTES = 1024 * 1024
LATEST_CREATED_AT = 2.0**33  # the year 2242
MAX_CLIP_SECONDS = 24 * 3600.0
MAX_SAMPLE_RATE = 1_000_000
_ENGINE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(-[a-z]{2,4})?")


class Unusable(Exception):
    """Why a stored voice folder cannot be served."""


def _matching(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"not {what}")
        return value

    return AfterValidator(check)


def _null_as(default: object) -> BeforeValidator:
    """A field earlier deployments may have written as null: read as `default`."""
    return BeforeValidator(lambda value: default if value is None else value)


EngineName = Annotated[str, _matching(_ENGINE_NAME, "an engine name")]
LanguageCode = Annotated[str, _matching(_LANGUAGE_CODE, "a language code")]
CreatedAt = Annotated[float, Field(ge=0.0, le=LATEST_CREATED_AT)]
"""Unix seconds; a NaN or an infinity is out of bounds too."""


class _Meta(BaseModel):
    # Strict: JSON's own types only (no "1.5" for a number, no 1 for true); fields of the other shape are ignored.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    @model_serializer(mode="wrap")
    def _without_language(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A voice registered without a language has no `language` key at all."""
        data: dict[str, Any] = handler(self)
        if data.get("language") is None:
            data.pop("language", None)
        return data

    def to_json(self) -> bytes:
        return json.dumps(self.model_dump(), ensure_ascii=False, indent=2).encode("utf-8")


class ClipMeta(_Meta):
    """A voice cloned from a reference clip (`voice.wav`, and `seed.wav` when it has a tone seed)."""

    voice_id: str | None = None
    engine: EngineName
    ref_text: Annotated[str, _null_as("")] = ""
    x_vector_only_mode: Annotated[bool, _null_as(False)] = False
    seed_text: str | None = None
    created_at: CreatedAt | None = None
    duration_s: Annotated[float, Field(ge=0.0, le=MAX_CLIP_SECONDS)] | None = None
    sample_rate: Annotated[int | float, Field(ge=1, le=MAX_SAMPLE_RATE)] | None = None
    language: LanguageCode | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_transcript(cls, data: Any) -> Any:
        """Earlier deployments named the transcript `text`."""
        if isinstance(data, dict) and "ref_text" not in data and "text" in data:
            return {**data, "ref_text": data["text"]}
        return data


class PackMeta(_Meta):
    """A Kokoro style pack (`voice_pack.npy`): no clip, so no transcript, duration or sample rate."""

    voice_id: str | None = None
    engine: EngineName
    kind: Literal["pack"] = "pack"
    created_at: CreatedAt | None = None
    language: LanguageCode | None = None


VoiceMeta = ClipMeta | PackMeta
_SHAPES: dict[str, Callable[[dict[str, Any]], VoiceMeta]] = {
    "clip": ClipMeta.model_validate,
    "pack": PackMeta.model_validate,
}


def read_meta(folder: Path) -> VoiceMeta:
    """The voice folder's `meta.json`, checked; `Unusable` says what is wrong with it."""
    meta = _read_object(folder / META_FILE)
    kind = meta.get("kind", "clip")
    shape = _SHAPES.get(kind) if isinstance(kind, str) else None
    if shape is None:
        raise Unusable(f"{META_FILE} has an unknown kind {_shown(kind)}")
    try:
        parsed = shape(meta)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = error["loc"][0] if error["loc"] else ""
        if error["type"] == "missing":
            raise Unusable(f"{META_FILE} has no {field!r}") from None
        raise Unusable(f"{META_FILE} field {field!r} is {_shown(error['input'])}: {error['msg']}") from None
    if "voice_id" in parsed.model_fields_set and parsed.voice_id != folder.name:
        raise Unusable(f"{META_FILE} belongs to voice {_shown(parsed.voice_id)}")
    return parsed


def _read_object(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_META_BYTES + 1)
    except FileNotFoundError:
        raise Unusable(f"no {META_FILE}") from None
    except OSError as exc:
        raise Unusable(f"unreadable {META_FILE} ({exc.strerror or exc})") from None
    if len(raw) > MAX_META_BYTES:
        raise Unusable(f"{META_FILE} is larger than {MAX_META_BYTES} bytes")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Unusable(f"unreadable {META_FILE} ({excerpt(str(exc), 120)})") from None
    if not isinstance(meta, dict):
        raise Unusable(f"{META_FILE} is not a JSON object")
    return meta


def _shown(value: object) -> str:
    """A value from a stored file as a log line quotes it: its start only."""
    return excerpt(repr(value), 40)
