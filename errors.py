"""Service errors and their one mapping onto HTTP responses.

Every error a client can cause is raised as a `ServiceError` subclass; `install_error_handlers` turns each into
a JSON body `{"code": ..., "message": ...}` with the right status. `code` is stable and machine-readable.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("polytts.errors")


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


class InvalidInput(ServiceError):
    status = 422
    code = "invalid_input"


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


class ClientDisconnected(ServiceError):
    """The client went away before its answer was ready; the status is only logged (nobody receives it)."""

    status = 499
    code = "client_disconnected"


_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 422: "invalid_input"}


def install_error_handlers(app: FastAPI, retry_after: float) -> None:
    """Map every error onto its JSON answer; 429 and 503 always carry Retry-After (`retry_after` by default)."""

    async def on_service_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServiceError)
        if exc.status in (429, 503) and exc.retry_after is None:
            exc.retry_after = retry_after
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"field": ".".join(str(p) for p in e["loc"] if p != "body"), "message": e["msg"]} for e in exc.errors()
        ]
        message = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return JSONResponse({"code": "invalid_input", "message": message, "detail": errors}, status_code=422)

    async def on_http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return JSONResponse({"code": code, "message": str(exc.detail)}, status_code=exc.status_code)

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse({"code": "internal_error", "message": "internal server error"}, status_code=500)

    app.add_exception_handler(ServiceError, on_service_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
