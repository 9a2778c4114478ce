"""The service's domain errors and the one table of their codes: each code's HTTP status and what it means.

A raising site names its code (`NotFound("...", code="voice_not_found")`); the status comes from `ERRORS`, which
also gives the API docs their explanations (`web.api_docs`). A code missing from the table is an error when the
exception is made, and so is a code whose status is not its class's (a `NotFound` is always a 404).

No web framework here: `http_errors.install_error_handlers` maps these errors onto responses, in the web layer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ErrorCode:
    """One stable, machine-readable error code of the API."""

    status: int | None
    """The HTTP status it answers; None only for `http_error`, which keeps the status the web framework chose."""
    meaning: str
    """When it is answered, for the API docs."""


ERRORS: dict[str, ErrorCode] = {
    "bad_request": ErrorCode(400, "The request is not well-formed: a JSON body that is not UTF-8, for example."),
    "malformed_multipart": ErrorCode(400, "A `multipart/form-data` body that does not parse."),
    "filename_too_long": ErrorCode(400, "A form part's file name is longer than any real file's."),
    "unauthorized": ErrorCode(
        401,
        "No valid API key: send `Authorization: Bearer <key>` (or `Token <key>`), `xi-api-key: <key>`, "
        "`X-API-Key: <key>` or `X-VAPI-SECRET: <key>` (on a WebSocket also the `xi-api-key`, `api_key` or `token` "
        "query parameter, or the `bearer.<key>` subprotocol). Only on a node with POLYTTS_API_KEYS or "
        "POLYTTS_ADMIN_KEYS set.",
    ),
    "forbidden": ErrorCode(403, "A valid key that may not do this."),
    "admin_key_required": ErrorCode(403, "The route needs an admin key (POLYTTS_ADMIN_KEYS); an ordinary key is not."),
    "not_found": ErrorCode(404, "Nothing is at this path."),
    "dictionary_not_found": ErrorCode(
        404, "No pronunciation dictionary (or no such version of it) of that id on this node (ElevenLabs' front)."
    ),
    "lexicon_not_found": ErrorCode(404, "No lexicon of that id is stored on this node."),
    "voice_not_found": ErrorCode(
        404, "No voice of that name or id: not a built-in voice, not registered here, not on any peer."
    ),
    "engine_not_found": ErrorCode(404, "No engine of that name."),
    "job_not_found": ErrorCode(404, "No job of that id belongs to this key on this node (a job lives on its node)."),
    "chapter_not_found": ErrorCode(404, "The job has no chapter of that index."),
    "model_not_found": ErrorCode(
        404, "The OpenAI `model` is neither an OpenAI speech model nor an engine here; `detail` lists the accepted."
    ),
    "method_not_allowed": ErrorCode(405, "The resource does not take this method; `Allow` names those it does."),
    "live_idle_timeout": ErrorCode(408, "The live request sent no message for POLYTTS_LIVE_IDLE_TIMEOUT_S."),
    "inactivity_timeout": ErrorCode(
        408, "An ElevenLabs WebSocket sent no message for its `inactivity_timeout` (20 s unless the query says)."
    ),
    "conflict": ErrorCode(409, "The request conflicts with what is stored."),
    "voice_exists": ErrorCode(
        409,
        "The voice id is registered with another transcript (send `replace=true` to replace it), or its folder "
        "cannot be loaded (`replace=true` overwrites it), or a registration of the same id at the same moment "
        "could not be read (retry).",
    ),
    "builtin_voice": ErrorCode(409, "A built-in voice cannot be deleted."),
    "job_not_done": ErrorCode(409, "The job's audio is asked for before the job is done."),
    "payload_too_large": ErrorCode(413, "The body is over a limit."),
    "job_too_long": ErrorCode(
        413, "A job's text is longer than POLYTTS_MAX_JOB_CHARS, or it has more chapters than POLYTTS_MAX_JOB_CHAPTERS."
    ),
    "range_not_satisfiable": ErrorCode(
        416, "The `Range` asked for lies outside the file (`Content-Range` says its size)."
    ),
    "body_too_large": ErrorCode(413, "The request body is larger than the route takes."),
    "file_too_large": ErrorCode(413, "A form file is larger than POLYTTS_MAX_UPLOAD_BYTES."),
    "field_too_large": ErrorCode(413, "A form field (not a file) is larger than a field may be."),
    "too_many_parts": ErrorCode(413, "The form has more parts than a route takes."),
    "audio_too_large": ErrorCode(413, "A clip, or a member of a bundle, is larger than POLYTTS_MAX_UPLOAD_BYTES."),
    "message_too_large": ErrorCode(413, "A live message (one line) is longer than a message may be."),
    "lexicon_too_large": ErrorCode(
        413, "A lexicon document larger than POLYTTS_MAX_LEXICON_BYTES, or with more than POLYTTS_MAX_LEXICON_ENTRIES."
    ),
    "text_too_long": ErrorCode(
        413,
        "The text is longer than POLYTTS_MAX_TEXT_CHARS as written (a run of spaces counts as one); for a live "
        "request, all of its text together.",
    ),
    "spoken_too_long": ErrorCode(
        413,
        "The text is longer than POLYTTS_MAX_SPOKEN_CHARS as spoken (numbers, money and dates read out as words; "
        "the message gives both counts); for a live request, all of its text together.",
    ),
    "unsupported_media_type": ErrorCode(415, "The body's media type is not one the route takes."),
    "expected_multipart": ErrorCode(415, "The route takes a `multipart/form-data` body."),
    "invalid_input": ErrorCode(422, "A value is invalid; `detail` gives each field's problem."),
    "invalid_field": ErrorCode(422, "A form field is not what it must be (not UTF-8, not `true` or `false`)."),
    "duplicate_field": ErrorCode(422, "A form field is given more than once."),
    "invalid_fairness_key": ErrorCode(422, "An X-Fairness-Key that is not at most 64 printable characters."),
    "engine_required": ErrorCode(422, "A registration names no `engine`."),
    "unknown_engine": ErrorCode(422, "The `engine` is none of the engine families this service knows."),
    "engine_unavailable": ErrorCode(
        422, "This node does not serve the engine (a voice of it is stored here: voices are portable)."
    ),
    "engine_cannot_clone": ErrorCode(422, "The engine cannot clone a voice from a clip (Kokoro takes a `voice_pack`)."),
    "engine_takes_no_pack": ErrorCode(422, "The engine clones from an `audio` clip and takes no `voice_pack`."),
    "audio_required": ErrorCode(422, "A registration has no `audio` clip (nor, for Kokoro, a `voice_pack`)."),
    "audio_and_pack": ErrorCode(422, "A registration gives both an `audio` clip and a `voice_pack`."),
    "invalid_audio": ErrorCode(422, "A clip that is not audio libsndfile can decode."),
    "empty_audio": ErrorCode(422, "A clip that holds no audio frames."),
    "audio_duration": ErrorCode(
        422, "A clip shorter than POLYTTS_VOICE_MIN_SECONDS or longer than POLYTTS_VOICE_MAX_SECONDS."
    ),
    "ref_text_required": ErrorCode(
        422, "`ref_text`, the clip's transcript, is missing; only `x_vector_only_mode` needs none."
    ),
    "ref_text_too_long": ErrorCode(422, "`ref_text` is longer than a transcript may be."),
    "seed_not_supported": ErrorCode(422, "The engine takes no tone seed (`seed_audio`, `seed_text`)."),
    "seed_text_required": ErrorCode(422, "`seed_audio` without its transcript, `seed_text`."),
    "seed_text_without_audio": ErrorCode(422, "`seed_text` without `seed_audio`."),
    "invalid_voice_id": ErrorCode(422, "A voice id that is not 16 lowercase hex digits."),
    "invalid_bundle": ErrorCode(
        422,
        "A voice bundle that is not one (not a zip, a member missing or wrong), or a lexicon bundle that is not "
        "a lexicon's canonical JSON.",
    ),
    "bundle_id_mismatch": ErrorCode(
        422, "A bundle whose content does not hash to the voice or lexicon id it claims; nothing is written."
    ),
    "pack_format": ErrorCode(
        422, "A voice pack of a file format this node cannot read (`.pt` needs torch on the node)."
    ),
    "pack_unreadable": ErrorCode(422, "A voice pack file that cannot be read as its format."),
    "pack_unsafe": ErrorCode(422, "A voice pack that holds pickled code or objects other than tensors; never run."),
    "pack_contents": ErrorCode(422, "A voice pack that does not hold exactly one tensor."),
    "pack_dtype": ErrorCode(422, "A voice pack whose values are not floating point."),
    "pack_shape": ErrorCode(422, "A voice pack whose shape is not (510, 1, 256)."),
    "pack_values": ErrorCode(422, "A voice pack that holds NaN or infinite values."),
    "invalid_blend": ErrorCode(422, "A blend formula that is wrong; `detail` names the part and its index."),
    "wrong_engine": ErrorCode(422, "The voice is another engine's than the one asked to speak it."),
    "voice_engine_mismatch": ErrorCode(422, "The voice is another engine's than the one the OpenAI `model` names."),
    "empty_text": ErrorCode(422, "The text holds nothing to speak (no letter, digit or symbol)."),
    "unreadable_text": ErrorCode(
        422,
        "The text holds nothing the voice's language can read: its letters are of scripts that language does not "
        "read (the message names them), which are skipped rather than spelled out letter by letter.",
    ),
    "invalid_lexicon": ErrorCode(
        422, "A lexicon that is not a PLS 1.0 document or a list of rules: the message names the element or entry."
    ),
    "invalid_ssml": ErrorCode(
        422,
        "SSML this node cannot honour: an unknown element (named), or an attribute out of range; `detail` gives the "
        "element, its line and column.",
    ),
    "invalid_lexicon_id": ErrorCode(422, "A lexicon id that is not 16 lowercase hex digits."),
    "malformed_xml": ErrorCode(
        422, "An XML document (a PLS lexicon, SSML) that is not well-formed; `detail` gives the line and column."
    ),
    "xml_unsafe": ErrorCode(
        422,
        "An XML document with a DTD, an entity declaration or an external reference (never parsed), or nested too "
        "deep; `detail` gives the line and column.",
    ),
    "unknown_alphabet": ErrorCode(422, "A phonetic alphabet other than ipa, x-sampa, cmu-arpabet or kokoro."),
    "unsayable_phonemes": ErrorCode(
        422, "Phonemes with symbols Kokoro cannot say; the message and `detail.symbols` name them."
    ),
    "phonemes_unsupported": ErrorCode(
        422,
        "Phonemes (a lexicon's phoneme entry, inline or SSML) for a voice whose engine reads text only; the "
        "message names the engine.",
    ),
    "too_many_lexicons": ErrorCode(422, "A request names more lexicons than POLYTTS_MAX_LEXICONS_PER_REQUEST."),
    "invalid_phoneme_text": ErrorCode(
        422, "Text that holds characters of Unicode plane 15 (Supplementary Private Use Area-A), which carry phonemes."
    ),
    "invalid_text": ErrorCode(422, "The text holds a lone UTF-16 surrogate, which is not a character."),
    "unsupported_language": ErrorCode(422, "A language the service, or the voice's engine, does not speak."),
    "language_not_installed": ErrorCode(
        422, "The language's G2P package is not installed on this node; the message names it."
    ),
    "unsupported_parameter": ErrorCode(
        422, "A parameter the engine, or its runtime, does not take; refused rather than ignored."
    ),
    "timestamps_unsupported": ErrorCode(
        422, "Word timings asked of an engine that cannot tell them, or of a raw stream."
    ),
    "denoiser_unavailable": ErrorCode(422, "`denoise` on a node that loads no denoiser (POLYTTS_VOXCPM_DENOISER)."),
    "max_new_tokens_too_large": ErrorCode(422, "`max_new_tokens` above this node's POLYTTS_QWEN_MAX_TOKENS."),
    "invalid_message": ErrorCode(
        422,
        'A live message that is not a JSON object `{"text": ...}`, `{"flush": true}` or `{"end": true}`; a Cartesia '
        "WebSocket message without its `context_id`, or a context's first message without `voice` and "
        "`output_format`.",
    ),
    "invalid_output_format": ErrorCode(422, "An ElevenLabs or Cartesia `output_format` this node does not answer."),
    "unsupported_voice_mode": ErrorCode(422, 'A Cartesia `voice` that is not `{"mode": "id", "id": ...}`.'),
    "context_closed": ErrorCode(
        422, "An ElevenLabs or Cartesia WebSocket message for a context already closed (or ended) on that socket."
    ),
    "upgrade_required": ErrorCode(426, "The route takes a WebSocket handshake."),
    "busy": ErrorCode(429, "The service is at a configured bound."),
    "too_many_contexts": ErrorCode(
        429,
        "An ElevenLabs `multi-stream-input` or Cartesia `tts/websocket` socket opening a context while 5 are open: "
        "close one first.",
    ),
    "fairness_key_queue_full": ErrorCode(
        429, "The request's fairness key has POLYTTS_MAX_PENDING_PER_KEY requests admitted."
    ),
    "engine_queue_full": ErrorCode(429, "The engine has POLYTTS_MAX_PENDING_PER_ENGINE requests admitted."),
    "job_queue_full": ErrorCode(
        429,
        "The key has POLYTTS_MAX_JOBS_PER_KEY jobs, or POLYTTS_MAX_JOB_CHARS_PER_KEY characters, queued or running.",
    ),
    "server_busy": ErrorCode(
        429, "POLYTTS_MAX_INFLIGHT requests are admitted, or POLYTTS_MAX_QUEUED_CHARS characters wait."
    ),
    "client_queue_full": ErrorCode(
        429, "The client's address holds its POLYTTS_MAX_CLIENT_SHARE of the admitted requests."
    ),
    "stream_capacity_full": ErrorCode(
        429, "The GPU thread could not keep another real-time stream next to the admitted ones."
    ),
    "live_sessions_full": ErrorCode(
        429,
        "POLYTTS_MAX_IDLE_LIVE live requests wait for text, or the client's address has "
        "POLYTTS_MAX_IDLE_LIVE_PER_CLIENT of them.",
    ),
    "client_disconnected": ErrorCode(499, "The client went away before its answer was ready; only logged."),
    "reader_stalled": ErrorCode(
        499, "The client took no audio for POLYTTS_READER_IDLE_LIMIT_S: its connection was closed; only logged."
    ),
    "internal_error": ErrorCode(500, "An unexpected failure; the log has its traceback."),
    "voice_damaged": ErrorCode(500, "A voice stored on this node fails its checks: delete it and register it again."),
    "voice_pack_corrupt": ErrorCode(
        500, "A stock Kokoro voice pack is missing or fails its checksum: restore data/kokoro-voices/."
    ),
    "unavailable": ErrorCode(503, "The service cannot answer now."),
    "warming": ErrorCode(503, "The engine is loading."),
    "engine_failed": ErrorCode(
        503, "The engine failed to load, or cannot load on this host; it is tried again after Retry-After."
    ),
    "draining": ErrorCode(503, "The node is draining before a restart: retry on another node."),
    "shutting_down": ErrorCode(503, "The node shut down before the synthesis was done."),
    "uploads_busy": ErrorCode(503, "Other uploads hold POLYTTS_UPLOAD_BUDGET_BYTES of memory."),
    "request_timeout": ErrorCode(
        504, "The synthesis was dropped before it finished: it ran past POLYTTS_REQUEST_TIMEOUT_S."
    ),
    "insufficient_storage": ErrorCode(507, "The disk is full (or over quota): nothing was stored."),
    "job_storage_full": ErrorCode(
        507, "The job's audio would pass its key's disk bound or the node's jobs quota: delete finished jobs."
    ),
    "http_error": ErrorCode(None, "Any other error the web framework answered itself, with its status."),
}


def error_code(code: str) -> ErrorCode:
    """The table's entry of `code`; a code that is not in it is a programming error, refused at once."""
    try:
        return ERRORS[code]
    except KeyError:
        raise ValueError(f"error code {code!r} is not in errors.ERRORS") from None


class ServiceError(Exception):
    """Base of every error that answers one code of `ERRORS`, with the status the table gives it."""

    code: str = "internal_error"
    """The code a class's errors answer when raised without one."""
    status: int
    """The HTTP status, from `ERRORS`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class's own code must be in the table, and a status it declares must be its code's."""
        super().__init_subclass__(**kwargs)
        fixed = error_code(cls.code).status
        if "status" in cls.__dict__ and cls.__dict__["status"] != fixed:
            raise TypeError(f"{cls.__name__}: error code {cls.code!r} answers {fixed}, not {cls.__dict__['status']}")

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retry_after: float | None = None,
        detail: Any = None,
        status: int | None = None,
    ) -> None:
        """`code` must answer the status of the class's own code; `status` is needed only by a code without one of
        its own (`http_error`)."""
        super().__init__(message)
        self.message = message
        own = error_code(self.code).status
        if code is not None:
            self.code = code
        fixed = error_code(self.code).status
        if status is None:
            if fixed is None:
                raise ValueError(f"error code {self.code!r} has no status of its own: pass the one it answers")
            status = fixed
        elif fixed not in (None, status):
            raise ValueError(f"error code {self.code!r} answers {fixed}, not {status}")
        if own not in (None, status):
            raise ValueError(f"error code {self.code!r} answers {status}, not the {own} of {type(self).__name__}")
        self.status = status
        self.retry_after = retry_after
        self.detail = detail

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        # Rounded up, never early: a client that comes back too soon is refused again.
        return {"Retry-After": str(max(1, math.ceil(self.retry_after - 1e-9)))}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        return body


class StreamCut(Exception):
    """A streamed answer that failed after its status was sent: the connection is cut, so the client sees an
    incomplete body. The failure is logged where it happened; `middleware.CutStreams` ends the request without a
    traceback (no handler may answer it: a status can no longer be sent)."""


class BadRequest(ServiceError):
    """The request itself is malformed (not one field of it): a multipart body that does not parse, for example."""

    code = "bad_request"


class InvalidInput(ServiceError):
    code = "invalid_input"


def invalid_fields(errors: Iterable[Mapping[str, Any]], prefix: str = "") -> InvalidInput:
    """A 422 naming each field that failed validation (pydantic's `errors()`); a body that is not JSON says so."""
    problems: list[dict[str, Any]] = []
    for error in errors:
        if error["type"] == "json_invalid":
            reason = (error.get("ctx") or {}).get("error", "")
            problems.append({"field": "body", "message": f"the request body is not valid JSON ({reason})"})
            continue
        field = ".".join(str(part) for part in error["loc"] if part != "body") or "body"
        problems.append({"field": field, "message": error["msg"]})
    message = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return InvalidInput(prefix + message, code="invalid_input", detail=problems)


class NotFound(ServiceError):
    code = "not_found"


class Conflict(ServiceError):
    code = "conflict"


class Unauthorized(ServiceError):
    code = "unauthorized"

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    """A valid key that may not do this (an ordinary key on an admin route)."""

    code = "forbidden"


class PayloadTooLarge(ServiceError):
    code = "payload_too_large"


class Busy(ServiceError):
    """The service is at a configured bound; the client should retry later."""

    code = "busy"


class Unavailable(ServiceError):
    """An engine is warming up or failed to load."""

    code = "unavailable"


class InsufficientStorage(ServiceError):
    """The disk is full (or over quota): nothing was stored, and retrying later may succeed."""

    code = "insufficient_storage"


class ClientDisconnected(ServiceError):
    """The client went away before its answer was ready; the status is only logged (nobody receives it)."""

    code = "client_disconnected"


class RangeNotSatisfiable(ServiceError):
    """A `Range` outside the file: the answer says the file's size (`Content-Range: bytes */<size>`)."""

    code = "range_not_satisfiable"

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message)
        self.size = size

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "Content-Range": f"bytes */{self.size}"}
