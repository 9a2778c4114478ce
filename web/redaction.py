"""Keys never reach the log: uvicorn logs a WebSocket's path with its query string ("WebSocket /path?query
[accepted]"), and some protocols carry the API key there (each front's `key_queries`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence

from web.front_spec import Front

ALWAYS_REDACTED = ("api-key", "access_token", "token")
"""Query parameters that carry a key whichever client sends them, beside the fronts' own."""


class RedactKeys(logging.Filter):
    """Rewrites the arguments of a log record so that no key-bearing query parameter (`names`) is written."""

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__()
        alternatives = "|".join(re.escape(name) for name in names)
        self.pattern = re.compile(rf"(?i)([?&](?:{alternatives})=)[^&\s\"]*")

    def redact(self, text: str) -> str:
        """`text` with the value of every key-bearing query parameter replaced."""
        return self.pattern.sub(r"\1[redacted]", text)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        return True


def install(fronts: Sequence[Front]) -> None:
    """On uvicorn's loggers, in place of what an earlier app installed: one filter however many apps are made."""
    redact = RedactKeys([*(name for front in fronts for name in front.key_queries), *ALWAYS_REDACTED])
    for name in ("uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        for installed in [known for known in logger.filters if isinstance(known, RedactKeys)]:
            logger.removeFilter(installed)
        logger.addFilter(redact)
