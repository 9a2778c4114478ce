"""The service's domain errors: each carries its HTTP status and a stable, machine-readable `code`.

No web framework here: `http_errors.install_error_handlers` maps them onto responses, in the web layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class ServiceError(Exception):
    """Base of every error that maps onto one HTTP status and code."""

    status: int = 500
    code: str = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retry_after: float | None = None,
        detail: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retry_after = retry_after
        self.detail = detail

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after)))}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        return body


class StreamCut(Exception):  # noqa: N818 - what happened, not an error to answer
    """A streamed answer that failed after its status was sent: the connection is cut, so the client sees an
    incomplete body. The failure is logged where it happened; `middleware.CutStreams` ends the request without a
    traceback (no handler may answer it: a status can no longer be sent)."""


class BadRequest(ServiceError):
    """The request itself is malformed (not one field of it): a multipart body that does not parse, for example."""

    status = 400
    code = "bad_request"


class InvalidInput(ServiceError):
    status = 422
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
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class Unauthorized(ServiceError):
    status = 401
    code = "unauthorized"

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    """A valid key that may not do this (an ordinary key on an admin route)."""

    status = 403
    code = "forbidden"


class PayloadTooLarge(ServiceError):
    status = 413
    code = "payload_too_large"


class Busy(ServiceError):
    """The service is at a configured bound; the client should retry later."""

    status = 429
    code = "busy"


class Unavailable(ServiceError):
    """An engine is warming up or failed to load."""

    status = 503
    code = "unavailable"


class InsufficientStorage(ServiceError):
    """The disk is full (or over quota): nothing was stored, and retrying later may succeed."""

    status = 507
    code = "insufficient_storage"


class ClientDisconnected(ServiceError):
    """The client went away before its answer was ready; the status is only logged (nobody receives it)."""

    status = 499
    code = "client_disconnected"
