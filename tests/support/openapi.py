"""What the OpenAPI tests share: the settings of the service whose schema they check (in this process, and the real
server Schemathesis runs against), and the operations of a schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema

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


def parsed_events(text: str) -> list[dict[str, str]]:
    """An event stream as Open API tools (Schemathesis) read it: `{"event", "data"}` per block with data (comments,
    such as keep-alives, are not events)."""
    events = []
    for block in text.split("\n\n"):
        fields = [line.partition(":")[::2] for line in block.splitlines() if line and not line.startswith(":")]
        data = [value.removeprefix(" ") for name, value in fields if name == "data"]
        if data:
            names = [value.removeprefix(" ") for name, value in fields if name == "event"]
            events.append({"data": "\n".join(data), **({"event": names[-1]} if names else {})})
    return events


def assert_documented_events(schema: dict[str, Any], path: str, method: str, text: str) -> None:
    """Every event of `text`, an answer of `method path`, is what its 200's `text/event-stream` schema says: the event
    itself, and its data against the data's `contentSchema` (which validators leave to the reader)."""
    documented = schema["paths"][path][method]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    components = {"components": schema["components"]}
    events = parsed_events(text)
    assert events, text
    for event in events:
        jsonschema.validate(event, {**documented, **components})
        content = documented["properties"]["data"]["contentSchema"]
        jsonschema.validate(json.loads(event["data"]), {**content, **components})
