"""The OpenAI speech API as PolyTTS speaks it, without a web framework: the request of `POST /v1/audio/speech`, model
and voice names, the list shapes of `GET /v1/models` and `GET /v1/audio/voices`, error bodies, and SSE framing.

Shapes follow OpenAI's OpenAPI description and the official `openai` package (requirements-dev.txt pins the version
the tests drive the routes with).
"""

from __future__ import annotations

import base64
import json
import logging
import math
from collections.abc import AsyncIterable, AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from audio.encoding import AudioFormat
from errors import ClientDisconnected, NotFound, ServiceError
from voicebank.voice_entry import VoiceEntry

log = logging.getLogger("polytts.openai")

SPEECH_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
"""OpenAI's speech model names (the `openai` package's `SpeechModel`); each one means the default engine."""

OWNER = "polytts"


SSE_MEDIA_TYPE = "text/event-stream"


def _not_empty(text: str) -> str:
    """`input`'s `min_length=1`, checked here: pydantic's own length check refuses a lone surrogate as a malformed
    string, where the text's cleaning refuses it with the code every route answers (`invalid_text`, text.cleaning)."""
    if not text:
        raise PydanticCustomError(
            "string_too_short", "String should have at least {min_length} character", {"min_length": 1}
        )
    return text


class VoiceObject(BaseModel):
    """The object form of `voice` (OpenAI's custom voice, `{"id": ...}`): its id is looked up as a name is."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, pattern=r"\S")


class SpeechRequest(BaseModel):
    """Body of `POST /v1/audio/speech`, as OpenAI's API and the `openai` package send it.

    Unknown fields are refused like OpenAI refuses them, so a field this server does not honour never passes
    silently. A JSON null in an optional field means its default (some clients send every field).
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="tts-1, tts-1-hd, gpt-4o-mini-tts (the default engine) or an engine.")
    input: Annotated[str, AfterValidator(_not_empty)] = Field(
        description="Text to speak.", json_schema_extra={"minLength": 1}
    )
    voice: Annotated[str, Field(pattern=r"\S")] | VoiceObject = Field(
        description="An OpenAI voice name (mapped by the voice table), a built-in voice, a blend, a registered "
        'voice id, or {"id": "..."}.'
    )
    response_format: AudioFormat = "mp3"
    speed: float = Field(
        1.0, ge=0.25, le=4.0, strict=True, description="Speaking rate, 0.25-4: a number (true is refused)."
    )
    instructions: str | None = Field(
        None,
        max_length=4096,
        description="Style prompt, at most 4,096 characters (longer is a 422): a CosyVoice voice speaks by it (its "
        "`instruct`); other engines take none, and the answer names it in X-Ignored-Parameters.",
    )
    stream_format: Literal["audio", "sse"] = "audio"
    lexicons: list[str] | None = Field(
        None,
        max_length=64,
        description="PolyTTS extension (the `openai` package sends it through `extra_body`): ids of stored "
        "pronunciation lexicons (`POST /lexicons`) to pronounce the input with.",
    )

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        optional = ("response_format", "speed", "instructions", "stream_format", "lexicons")
        if isinstance(data, Mapping):
            return {key: value for key, value in data.items() if not (key in optional and value is None)}
        return data

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_shape(cls, value: Any) -> Any:
        # One clear message for every wrong shape, instead of one per member of the union.
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, Mapping) and set(value) == {"id"} and isinstance(value["id"], str) and value["id"].strip():
            return VoiceObject(id=value["id"].strip())
        if isinstance(value, VoiceObject):
            return value
        raise ValueError('voice must be a voice name or an object {"id": "<voice id>"}')


def resolve_voice(voice: str | VoiceObject, table: Mapping[str, str]) -> str:
    """The PolyTTS voice a request names, as a name or as `{"id": name}` alike: an OpenAI name through the table,
    every other name as given (a built-in voice, a blend or a registered voice id, which the service resolves)."""
    name = voice.id if isinstance(voice, VoiceObject) else voice
    return table.get(name, name)


def accepted_models(engines: Iterable[str]) -> list[str]:
    return [*SPEECH_MODELS, *sorted(engines)]


def resolve_model(model: str, default_engine: str, engines: Collection[str]) -> str:
    """The engine a `model` names: OpenAI's speech models mean the default engine; an engine name means itself."""
    if model in SPEECH_MODELS:
        return default_engine
    if model in engines:
        return model
    accepted = accepted_models(engines)
    raise NotFound(
        f"The model {model!r} does not exist here. Accepted models: {', '.join(accepted)}.",
        code="model_not_found",
        detail={"param": "model", "accepted": accepted},
    )


def model_entry(model_id: str, engine: str, created: int = 0) -> dict[str, Any]:
    """One model of `GET /v1/models` (OpenAI's `Model`), plus the engine it runs on."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": OWNER, "engine": engine}


def models_list(engines: Iterable[str], default_engine: str, created: int = 0) -> dict[str, Any]:
    """`GET /v1/models`: OpenAI's speech models (on the default engine), then one model per engine."""
    entries = [model_entry(name, default_engine, created) for name in SPEECH_MODELS]
    entries += [model_entry(name, name, created) for name in sorted(engines)]
    return {"object": "list", "data": entries}


class NamedVoice(Protocol):
    """A built-in voice as engines list it (`engines.base.BuiltinVoice`)."""

    @property
    def name(self) -> str: ...

    @property
    def engine(self) -> str: ...

    @property
    def language(self) -> str: ...


VoiceKind = Literal["builtin", "registered", "openai"]


def _voice(voice_id: str, kind: VoiceKind, engine: str | None, language: str | None) -> dict[str, Any]:
    return {
        "id": voice_id,
        "name": voice_id,
        "object": "audio.voice",
        "kind": kind,
        "engine": engine,
        "language": language,
    }


def voices_list(
    builtins: Iterable[NamedVoice], registered: Iterable[VoiceEntry], table: Mapping[str, str]
) -> dict[str, Any]:
    """`GET /v1/audio/voices`: every built-in voice with its language, every registered voice with its engine, and
    the OpenAI names with the voice each maps to (engine and language null when that voice is not on this node).

    The list is under `data` (OpenAI's list shape) and again under `voices`, where Open WebUI and clients written for
    Kokoro-FastAPI look for `{"id", "name"}` entries.
    """
    builtin = {voice.name: _voice(voice.name, "builtin", voice.engine, voice.language) for voice in builtins}
    own = {
        entry.voice_id: {
            **_voice(entry.voice_id, "registered", entry.engine, entry.language),
            "created_at": int(entry.created_at),
        }
        for entry in registered
    }
    known = {**builtin, **own}
    aliases = []
    for name, target in sorted(table.items()):
        found = known.get(target, {})
        aliases.append({**_voice(name, "openai", found.get("engine"), found.get("language")), "maps_to": target})
    data = [*builtin.values(), *own.values(), *aliases]
    return {"object": "list", "data": data, "voices": data}


# --- errors -------------------------------------------------------------------------------------------------------


class OpenAIError(BaseModel):
    message: str
    type: str = Field(description="`invalid_request_error`, `requests` (a rate limit) or `server_error`.")
    param: str | None = Field(description="The request field at fault, where one is.")
    code: str = Field(description="The service's stable code, as in the native API's error body.")


class OpenAIErrorBody(BaseModel):
    """The body of every error the /v1 routes answer, in OpenAI's shape."""

    error: OpenAIError


def error_type(status: int) -> str:
    """OpenAI's error `type` for a status, as its API sends them: client errors, a bad API key and an unknown model
    alike, are `invalid_request_error`; a rate limit is `requests` (the limit hit is on requests); the rest is
    `server_error`. The `openai` package picks its exception class from the status alone."""
    if status == 429:
        return "requests"
    if 400 <= status < 500:
        return "invalid_request_error"
    return "server_error"


def error_body(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`, carrying our stable code."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def service_error_body(exc: ServiceError) -> dict[str, Any]:
    """The OpenAI body of a domain error; `param` is the request field named by `detail["param"]`, if any."""
    param = exc.detail.get("param") if isinstance(exc.detail, Mapping) else None
    return error_body(exc.status, exc.code, exc.message, param if isinstance(param, str) else None)


def validation_error_body(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The OpenAI body of a request that failed validation, from pydantic's (or FastAPI's) `errors()` list.

    `param` is the first offending top-level field; the message lists every error as `field: what is wrong`.
    """
    messages, params = [], []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if part != "body"]
        field = loc[0] if loc and not loc[0].isdigit() else None
        if field is not None:
            params.append(field)
        messages.append(f"{field}: {error.get('msg', 'invalid')}" if field else str(error.get("msg", "invalid")))
    message = "; ".join(messages) or "invalid request"
    return error_body(422, code="invalid_input", message=message, param=params[0] if params else None)


# --- server-sent events -------------------------------------------------------------------------------------------


def sse_event(payload: Mapping[str, Any]) -> bytes:
    """One event as OpenAI frames its speech events: a single `data:` line of compact JSON, then a blank line."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def speech_audio_delta(audio: bytes) -> bytes:
    return sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode("ascii")})


def speech_usage(text: str, audio_seconds: float) -> dict[str, int]:
    """Usage in units PolyTTS has, not BPE tokens: input characters, and output audio in 20 ms frames."""
    input_tokens, output_tokens = len(text), math.ceil(audio_seconds * 50)
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}


def speech_audio_done(usage: Mapping[str, int]) -> bytes:
    return sse_event({"type": "speech.audio.done", "usage": dict(usage)})


async def speech_events(chunks: AsyncIterable[bytes], usage: Callable[[], Mapping[str, int]]) -> AsyncIterator[bytes]:
    """The body of `stream_format="sse"`: a `speech.audio.delta` per non-empty encoded chunk, then
    `speech.audio.done` with `usage()` (read once the audio is complete).

    A service error after the response has begun cannot change its status any more: it ends the stream with an
    error event, `data: {"error": {...}}`, which the `openai` package's SSE reader raises as an APIError.
    """
    try:
        async for chunk in chunks:
            if chunk:
                yield speech_audio_delta(chunk)
    except ClientDisconnected:
        raise
    except ServiceError as exc:
        log.warning("speech stream ended by %s: %s", exc.code, exc.message)
        yield sse_event(service_error_body(exc))
        return
    yield speech_audio_done(usage())
