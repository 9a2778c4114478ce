"""Probes of refusals: a request refused before its speech route runs (no key, a wrong key) is one log line and one
count in `polytts_requests_total`, a WebSocket handshake's as any other's, and uvicorn logs no ERROR for it."""

from __future__ import annotations

import base64
from collections.abc import Callable

import httpx
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from bench.abuse.probing import Answer, Target, expect, requests_total

WEBSOCKET = "WEBSOCKET"
SPEECH_ROUTES = (
    ("POST", "/tts"),
    ("POST", "/tts/stream"),
    ("POST", "/v1/audio/speech"),
    ("POST", "/tts/live"),
    ("PUT", "/tts/live"),
    (WEBSOCKET, "/tts/live/ws"),
)
BODIES = {
    "/tts": b'{"text": "Refused before it is read."}',
    "/tts/stream": b'{"text": "Refused before it is read."}',
    "/v1/audio/speech": b'{"model": "tts-1", "input": "Refused before it is read.", "voice": "alloy"}',
    "/tts/live": b'{"text": "Refused before it is read."}\n',
}
WRONG_KEY = "not-the-probe-key"


def status_of(target: Target, method: str, path: str, key: str | None) -> int:
    """The status a request with `key` (None: none) gets; a WebSocket's is its handshake's (101: accepted)."""
    if method == WEBSOCKET:
        offered = ["polytts"] + (
            [f"bearer.{base64.urlsafe_b64encode(key.encode()).decode().rstrip('=')}"] if key else []
        )
        try:
            with connect(target.url.replace("http", "ws", 1) + path, subprotocols=[Subprotocol(p) for p in offered]):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # Not target.client(): it would send the probe's own, valid key.
    return httpx.request(method, target.url + path, content=BODIES[path], headers=headers, timeout=30).status_code


def refused_twice(target: Target, method: str, path: str, own: bool) -> Callable[[], Answer]:
    """A request without a key and one with a wrong key: each a 401, counted once and (own server) logged once."""
    route = path.strip("/")

    def run() -> Answer:
        before = requests_total(target.url, route, "unauthorized")
        logged = len(target.log_says()) if own else 0
        statuses = [status_of(target, method, path, key) for key in (None, WRONG_KEY)]
        expect(statuses == [401, 401], f"answered {statuses}, not [401, 401]")
        counted = requests_total(target.url, route, "unauthorized") - before
        expect(counted == 2, f'polytts_requests_total{{route="{route}",outcome="unauthorized"}} rose by {counted:g}')
        if not own:
            return Answer("401 x2", "each counted once")
        said = target.log_says()[logged:]
        expect("without completing handshake" not in said, "uvicorn logged 'returned without completing handshake'")
        lines = [text for text in said.splitlines() if f": {route} outcome=unauthorized status=401 " in text]
        expect(len(lines) == 2, f"{len(lines)} log lines for 2 refusals (the server logs at POLYTTS_LOG_LEVEL=info?)")
        return Answer("401 x2", "each counted once and logged in one line; no uvicorn ERROR")

    return run


def probes(target: Target, own: bool) -> None:
    no_keys = None if target.api_key else "needs a server with API keys (--api-key)"
    for method, path in SPEECH_ROUTES:
        name = f"401s logged, counted: {'WS' if method == WEBSOCKET else method} {path}"
        target.probe(name, refused_twice(target, method, path, own), no_keys)
