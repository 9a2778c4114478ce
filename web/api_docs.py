"""What /openapi.json says beyond what FastAPI infers from the routes' signatures.

Routes document their own answers with the helpers here: `errors(...)` for the error statuses a route decides (the
`{code, message, detail?}` body, or its front's own shape; `Retry-After` on 429 and 503), `audio(...)` for audio
answers (every media type a `format` can pick, the `X-Sample-Rate`... headers), and `form_body`, `file_body` and
`live_body` for the bodies routes read themselves. `install` adds, once, what every route shares: API keys (401), the
fairness key and its 422, the JSON body limit (413) and unparsable bodies (400), each in the error shape of the
route's front, every front's error model, and the text limit of this node's settings on each front's text fields;
FastAPI's own validation-error schema, which no answer has, is replaced by the service's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from audio.encoding import AUDIO_FORMATS, MEDIA_TYPES, AudioFormat
from errors import ERRORS
from web.front_spec import Front, front_for

Responses = dict[int | str, dict[str, Any]]

COMPONENTS = "#/components/schemas/"
BEARER = "bearerAuth"


class ErrorBody(BaseModel):
    """The body of every error the native API answers."""

    code: str = Field(description="Stable and machine-readable, e.g. `voice_not_found`, `text_too_long`, `busy`.")
    message: str = Field(description="What went wrong, for people.")
    detail: Any = Field(
        None,
        description="More, where there is more: each field's problem of an `invalid_input` (422), the part of a "
        "blend that is wrong.",
    )


RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again (here, or on another node).",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"required": True, "schema": {"type": "string", "const": "Bearer"}}},
    429: RETRY_AFTER,
    503: RETRY_AFTER,
}
_SUMMARY: dict[int, str] = {
    400: "The body is not well-formed.",
    401: "A valid API key is needed; only on a node with POLYTTS_API_KEYS or POLYTTS_ADMIN_KEYS set.",
    403: "The key is valid but may not do this; only on a node with keys set.",
    404: "What the request names is not here.",
    408: "The client sent nothing for too long.",
    409: "The request conflicts with what is registered.",
    413: "Too large.",
    415: "The body's media type is not one the route takes.",
    416: "The range asked for lies outside the file.",
    422: "A value is invalid.",
    429: "At a configured bound: retry after Retry-After seconds, here or on another node.",
    503: "Not now: retry after Retry-After seconds, here or on another node.",
    507: "The disk is full.",
}
"""What an error status means; the codes that answer it, and when, come from `errors.ERRORS`."""


def _why(status: int) -> str:
    """The status's summary, then each code of `errors.ERRORS` that answers it, with its meaning."""
    codes = [f"- `{code}`: {entry.meaning}" for code, entry in ERRORS.items() if entry.status == status]
    return "\n".join([_SUMMARY[status], "", *codes])


ErrorShape = type[BaseModel]


def _error(status: int, shape: ErrorShape) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "description": _why(status),
        "content": {"application/json": {"schema": {"$ref": COMPONENTS + shape.__name__}}},
    }
    if status in _HEADERS:
        entry["headers"] = _HEADERS[status]
    return entry


def errors(*statuses: int, shape: ErrorShape = ErrorBody) -> Responses:
    """`responses=` entries for the error statuses a route answers itself, in `shape` (its front's error model)."""
    return {status: _error(status, shape) for status in statuses}


_BINARY = {"schema": {"type": "string", "format": "binary"}}
_FORMATS_TEXT = (
    "The `format` picks the encoding: pcm is raw s16le mono at X-Sample-Rate (application/octet-stream), wav "
    "audio/wav, mp3 audio/mpeg, opus Ogg Opus (audio/ogg), aac ADTS (audio/aac), flac audio/flac."
)
_SPEECH_HEADERS: dict[str, dict[str, Any]] = {
    "X-Sample-Rate": {"description": "Samples per second of the audio.", "schema": {"type": "integer", "minimum": 1}},
    "X-Audio-Format": {
        "description": "`s16le` for pcm, else the format's name.",
        "schema": {"type": "string", "enum": ["s16le", *(f for f in AUDIO_FORMATS if f != "pcm")]},
    },
    "X-Channels": {"description": "Always 1 (mono).", "schema": {"type": "integer", "const": 1}},
    "X-Engine": {"description": "The engine that speaks.", "schema": {"type": "string"}},
    "X-Voice-Id": {"description": "The voice, as the engine's caches know it.", "schema": {"type": "string"}},
    "X-Cache": {
        "description": "`hit` when the audio came from the cache, without the GPU.",
        "schema": {"type": "string", "enum": ["hit", "miss"]},
    },
}


def _audio_content(default: AudioFormat) -> dict[str, Any]:
    """A `content` map of every audio media type, `default`'s first (what an answer without `format` is)."""
    formats = [default, *(fmt for fmt in AUDIO_FORMATS if fmt != default)]
    return {MEDIA_TYPES[fmt]: _BINARY for fmt in formats}


def audio(
    default: AudioFormat,
    description: str,
    *,
    more: Mapping[str, Any] | None = None,
    model: type[BaseModel] | None = None,
    always: Iterable[str] | None = None,
) -> Responses:
    """A 200 of audio, in `default` when the request names no format. `more`: further media types (an event stream,
    captions); `model`: the schema of a JSON answer; `always`: the headers every answer has (all when None, the
    others only with audio)."""
    required = set(_SPEECH_HEADERS if always is None else always)
    headers = {name: {**header, "required": name in required} for name, header in _SPEECH_HEADERS.items()}
    entry: dict[str, Any] = {
        "description": f"{description} {_FORMATS_TEXT}",
        "content": {**_audio_content(default), **(more or {})},
        "headers": headers,
    }
    if model is not None:
        entry["model"] = model  # FastAPI adds its schema as application/json, and the model to the components
    return {200: entry}


def file_answer(media_type: str, description: str) -> Responses:
    """A 200 of one binary file of `media_type`."""
    return {200: {"description": description, "content": {media_type: _BINARY}}}


def event_stream(description: str, events: Sequence[str], data: Mapping[str, Any]) -> Responses:
    """A 200 of server-sent events. Before Open API 3.2 (`itemSchema`) a stream's `schema` describes one event as its
    readers parse it, `{"event", "data"}`: `events` the event names it may carry, `data` the JSON schema of its
    `data:` line (as `contentSchema` of a JSON string)."""
    event = {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"enum": list(events)},
            "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": dict(data)},
        },
    }
    return {200: {"description": description, "content": {"text/event-stream": {"schema": event}}}}


def file_body(media_type: str, description: str) -> dict[str, Any]:
    """`openapi_extra` of a route that reads a whole binary body itself (not through a parameter)."""
    return {"requestBody": {"required": True, "description": description, "content": {media_type: _BINARY}}}


def form_body(form: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` of a route that reads a multipart form itself, part by part (`uploads.read_form`): each
    field of `form` is a part, sent or left out (a part cannot be null)."""
    schema = form.model_json_schema()
    schema["properties"] = {name: _not_null(field) for name, field in schema["properties"].items()}
    content = {"multipart/form-data": {"schema": schema}}
    return {"requestBody": {"required": True, "description": schema.pop("description", ""), "content": content}}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its null alternative: a parameter or a form part is a value or absent, never null."""
    choices = [choice for choice in schema.get("anyOf", ()) if choice != {"type": "null"}]
    if len(choices) != 1:
        return schema
    rest = {key: value for key, value in schema.items() if key not in ("anyOf", "default")}
    return {**rest, **choices[0]}


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """Each field of `model` as an optional query parameter (for routes that validate their query themselves)."""
    properties = model.model_json_schema()["properties"]
    return [
        {
            "name": name,
            "in": "query",
            "required": False,
            "description": schema.get("description", ""),
            "schema": _not_null(schema),
        }
        for name, schema in properties.items()
    ]


def live_body(options: type[BaseModel], message: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` of the streamed live route: its options as query parameters, and a body of JSON lines.

    The body's schema is one line's, as event streams are described before OpenAPI 3.2: every line is a message,
    and the first may carry the request's options instead of the query string."""
    line = message.model_json_schema()
    first = {**line, "properties": {**options.model_json_schema()["properties"], **line["properties"]}}
    description = (
        "Newline-delimited JSON, sent while it is written (a chunked body): each line one message. The first line "
        f"may also carry the options (the query parameters' names). {message.__doc__}"
    )
    return {
        "parameters": _query_parameters(options),
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/x-ndjson": {"schema": first}},
        },
    }


_FAIRNESS_KEY = {
    "name": "X-Fairness-Key",
    "in": "header",
    "required": False,
    "description": "On a node without API keys: whose share of the queue this request counts against (at most 64 "
    "printable characters). With keys, the key's name is, and this header is ignored.",
    "schema": {"type": "string", "maxLength": 64},
}


def install(app: FastAPI, *, public: Callable[[str], bool], max_text_chars: int, fronts: Sequence[Front]) -> None:
    """Have `app.openapi()` add what every route shares; `public` tells the paths answered without a key, `fronts`
    the error shape of each path and the request fields (`Front.text_fields`) bounded by POLYTTS_MAX_TEXT_CHARS."""
    built: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not built:
            built.update(_complete(FastAPI.openapi(app), public, max_text_chars, fronts))
        return built

    # Replacing the method is how FastAPI documents extending its schema; mypy refuses assigning to a method.
    app.openapi = openapi  # type: ignore[method-assign]


def _complete(
    schema: dict[str, Any], public: Callable[[str], bool], max_text_chars: int, fronts: Sequence[Front]
) -> dict[str, Any]:
    components = schema.setdefault("components", {})
    models = components.setdefault("schemas", {})
    for model in dict.fromkeys(front.error_model for front in fronts):
        found = model.model_json_schema(ref_template=COMPONENTS + "{model}")
        models.update(found.pop("$defs", {}))
        models[model.__name__] = found
    for front in fronts:
        for request, field in front.text_fields:
            models[request.__name__]["properties"][field]["maxLength"] = max_text_chars
    components.setdefault("securitySchemes", {})[BEARER] = {
        "type": "http",
        "scheme": "bearer",
        "description": "Only on a node with POLYTTS_API_KEYS or POLYTTS_ADMIN_KEYS set; every route but /health, "
        "/ready, /metrics and the docs then needs a key.",
    }
    for path, operations in schema.get("paths", {}).items():
        shape = front_for(fronts, path).error_model
        for operation in operations.values():
            _shared(operation, shape, keyed=not public(path))
    for unused in ("HTTPValidationError", "ValidationError"):
        models.pop(unused, None)
    return schema


def _shared(operation: dict[str, Any], shape: ErrorShape, keyed: bool) -> None:
    responses = operation.setdefault("responses", {})
    for status, entry in list(responses.items()):
        if "HTTPValidationError" in str(entry):  # FastAPI's default 422: the service answers its own body
            responses[status] = _error(int(status), shape)
    for parameter in operation.get("parameters", ()):
        parameter["schema"] = _not_null(parameter["schema"])
    shared: list[int] = []
    if keyed:
        operation["security"] = [{BEARER: []}, {}]
        operation.setdefault("parameters", []).append(_FAIRNESS_KEY)
        shared += [401, 422]
    body = operation.get("requestBody", {}).get("content", {})
    if body:
        shared.append(413)  # the service's body limit, and each upload route's own
    if "application/json" in body:
        shared.append(400)
    for status in shared:
        responses.setdefault(str(status), _error(status, shape))
    operation["responses"] = dict(sorted(responses.items()))
