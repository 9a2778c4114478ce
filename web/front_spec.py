"""What a front is: one client API on the same lifecycle (the native API, OpenAI's, ElevenLabs', Cartesia's), as the
shared web modules see it.

Each package under web/fronts/ exports one `Front`, and `web.fronts.FRONTS` lists them; the app factory mounts their
routers, and the error mapping (`http_errors`), the API docs (`api_docs`), the keys (`auth`) and the log redaction
(`redaction`) are given that list and read what they need of each front from here, so none of them names a front.
The spec lives outside web/fronts/ because those shared modules sit below the fronts, which import them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from errors import ServiceError

ErrorBodyOf = Callable[[ServiceError], dict[str, Any]]
"""A front's error body: the JSON its clients read an error from."""
HandshakeHeadersOf = Callable[[ServiceError], dict[str, str]]
"""Headers a front's refused WebSocket handshake carries beside its error body, which WebSocket clients do not read."""
ValidationBodyOf = Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]
"""A front's own body for a request that failed validation, from pydantic's `errors()` list."""


@dataclass(frozen=True)
class KeyHeader:
    """A header a front's clients send their API key in, as the 401's message names it."""

    name: str
    """The header as its clients' documentation writes it (headers are matched without regard to case)."""
    clients: str
    """Whose clients send it, as the 401's message says: `ElevenLabs' clients`."""


@dataclass(frozen=True)
class Front:
    """One front: where it lives, its routes, and what the shared modules answer and document for it."""

    name: str
    prefix: str
    """The base path its clients are given: `/v1` for OpenAI's, `/elevenlabs`, `/cartesia`; "" for the native API
    at the root, which is every path's front that lies under no other."""
    routers: tuple[APIRouter, ...]
    error_body: ErrorBodyOf
    """The body of every error on its paths, its routes' or not (an unknown route, a 401, a 413)."""
    error_model: type[BaseModel]
    """The model of `error_body`, documenting every error of its paths in the OpenAPI description."""
    validation_error_body: ValidationBodyOf | None = None
    """Its own body for a request that failed validation, where its vendor has one (OpenAI's); otherwise such a
    request is an `invalid_input` in `error_body`."""
    key_headers: tuple[KeyHeader, ...] = ()
    """Headers its clients send their API key in, beside `Authorization: Bearer`."""
    key_queries: tuple[str, ...] = ()
    """Query parameters its WebSocket clients send their key in; they never reach the log (`redaction`)."""
    key_schemes: tuple[str, ...] = ()
    """`Authorization` schemes its clients send their key under, beside `Bearer` (Deepgram's `Token`)."""
    speech_paths: tuple[str, ...] = ()
    """Paths (and the paths under them) of its speech routes, which log a line of their own with the audio's
    timings instead of the access log's."""
    own_body_limits: tuple[str, ...] = ()
    """Paths of its routes that bound their bodies themselves as they arrive (a live text stream)."""
    text_fields: tuple[tuple[type[BaseModel], str], ...] = ()
    """Its request models and the field of each holding the text to speak, which its docs bound by
    POLYTTS_MAX_TEXT_CHARS."""
    handshake_headers: HandshakeHeadersOf | None = None
    """Headers of its refused WebSocket handshakes (Deepgram's `dg-request-id` and `dg-error`)."""

    def serves(self, path: str) -> bool:
        """Whether `path` lies under the front's prefix (every path does under the root's)."""
        return not self.prefix or path.startswith(self.prefix + "/")


def front_for(fronts: Sequence[Front], path: str) -> Front:
    """The front a path belongs to: the one with the longest prefix it lies under (`/elevenlabs/v1/...` is
    ElevenLabs', `/v1/...` OpenAI's, anything else the native API's)."""
    return max((front for front in fronts if front.serves(path)), key=lambda front: len(front.prefix))
