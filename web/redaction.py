"""Keys never reach the log: uvicorn logs a WebSocket's path with its query string ("WebSocket /path?query
[accepted]"), and some protocols carry the API key there (ElevenLabs' `xi-api-key`, Cartesia's `api_key`)."""

from __future__ import annotations

import logging
import re

_KEY_IN_QUERY = re.compile(r"(?i)([?&](?:xi-api-key|api_key|api-key|access_token|token)=)[^&\s\"]*")


def redact(text: str) -> str:
    """`text` with the value of every key-bearing query parameter replaced."""
    return _KEY_IN_QUERY.sub(r"\1[redacted]", text)


class RedactKeys(logging.Filter):
    """Rewrites the arguments of a log record so that no key-bearing query parameter is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


REDACT_KEYS = RedactKeys()


def install() -> None:
    """On uvicorn's loggers, once however many apps are made (adding the same filter twice is a no-op)."""
    for name in ("uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).addFilter(REDACT_KEYS)
