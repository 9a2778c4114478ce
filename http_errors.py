"""The one mapping from errors onto HTTP responses: a JSON body `{"code", "message"}` with the right status."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from errors import ServiceError

log = logging.getLogger("polytts.errors")

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
