"""Schemathesis hooks of tests/e2e/test_openapi.py: how a generated body of the live route goes on the wire."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def json_line(_: Any, value: Any) -> bytes:
    """One generated value is one line: the schema describes a line of the body (as event streams are described
    before OpenAPI 3.2), so a case is a request whose first (and only) message is the value."""
    return json.dumps(value).encode() + b"\n"


# A voice bundle is bytes as generated: a zip that is not one is a 422 `invalid_bundle`.
schemathesis.serializer.alias("application/zip", "application/octet-stream")
