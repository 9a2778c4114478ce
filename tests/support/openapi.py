"""What the OpenAPI tests share: the settings of the service whose schema they check (in this process, and the real
server Schemathesis runs against), and the operations of a schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_TEXT_CHARS = 40
"""The service's POLYTTS_MAX_TEXT_CHARS: the schema's text limit, and a bound on what Schemathesis makes it say."""


def openapi_env(tmp: Path) -> dict[str, str]:
    """A short text limit; VoxCPM's weights point nowhere, so it is a served engine that failed (its 503s are
    answered at once instead of after a hub lookup)."""
    return {"POLYTTS_MAX_TEXT_CHARS": str(MAX_TEXT_CHARS), "POLYTTS_VOXCPM_MODEL": str(tmp / "no-voxcpm")}


def operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield path, method, operation
