"""Requests refused before their route runs, in this process: on every speech route a missing or wrong key, a bad
X-Fairness-Key, a body over the limit, an unknown OpenAI model and a handshake to a draining node are each one log
line (with the request's id) and one count in `polytts_requests_total`, as the route's other refusals are; every
other refusal (an unknown path, a handshake no route takes) is one access line and one count in
`polytts_http_requests_total`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from bench.abuse.refusals import SPEECH_ROUTES, WEBSOCKET
from tests.support.apps import InProcessApp
from web.app import MAX_JSON_BODY_BYTES

KEY = "refusal-secret"
REQUEST_ID = "refusal-trace-1"
BODIES: dict[str, bytes] = {
    "/tts": b'{"text": "hi"}',
    "/tts/stream": b'{"text": "hi"}',
    "/v1/audio/speech": b'{"model": "tts-1", "input": "hi", "voice": "alloy"}',
    "/tts/live": b'{"text": "hi"}\n',
}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    keys = json.dumps({KEY: "refusals"})
    with InProcessApp(tmp_path_factory.mktemp("keyed"), POLYTTS_WARM_ON_START="false", POLYTTS_API_KEYS=keys) as app:
        yield app


@pytest.fixture(scope="module")
def keyless(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    with InProcessApp(tmp_path_factory.mktemp("keyless"), POLYTTS_WARM_ON_START="false") as app:
        yield app


def counted(client: TestClient, name: str, labels: dict[str, str]) -> float:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def requests_total(client: TestClient, route: str, outcome: str) -> float:
    return counted(client, "polytts_requests_total", {"engine": "none", "route": route, "outcome": outcome})


def http_requests_total(client: TestClient, route: str, status: int) -> float:
    return counted(client, "polytts_http_requests_total", {"route": route, "status": str(status)})


def send(client: TestClient, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> int:
    """The status a request gets; a WebSocket's is that of its denied handshake."""
    if method == WEBSOCKET:
        with pytest.raises(WebSocketDenialResponse) as denied:
            with client.websocket_connect(path, headers=headers, subprotocols=["polytts"]):
                pass
        return denied.value.status_code
    return client.request(method, path, content=BODIES[path] if body is None else body, headers=headers).status_code


def refused_once(app: InProcessApp, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> str:
    """Send one request that must be refused before its route runs: its status, and the one line it logged (which
    ends with the request's id: REQUEST_ID, sent as the client's own)."""
    route = path.strip("/")
    logged = len(app.log())
    status = send(app.client, method, path, {**headers, "X-Request-Id": REQUEST_ID}, body)
    lines = app.log()[logged:].splitlines()
    assert len(lines) == 1 and f"{route} outcome=" in lines[0], lines
    assert lines[0].endswith(f" id={REQUEST_ID}"), lines
    return f"{status} {lines[0].split(': ', 1)[1].removesuffix(f' id={REQUEST_ID}')}"


@pytest.mark.parametrize(("method", "path"), SPEECH_ROUTES)
@pytest.mark.parametrize("auth", [{}, {"Authorization": "Bearer wrong"}], ids=["no-key", "wrong-key"])
def test_a_401_on_a_speech_route_is_logged_and_counted(
    keyed: InProcessApp, method: str, path: str, auth: dict[str, str]
) -> None:
    route = path.strip("/")
    before = requests_total(keyed.client, route, "unauthorized")
    answer = refused_once(keyed, method, path, auth)
    assert answer == f"401 {route} outcome=unauthorized status=401 client=testclient"
    assert requests_total(keyed.client, route, "unauthorized") == before + 1


@pytest.mark.parametrize(("method", "path"), SPEECH_ROUTES)
def test_a_bad_fairness_key_on_a_keyless_node_is_logged_and_counted(
    keyless: InProcessApp, method: str, path: str
) -> None:
    route = path.strip("/")
    before = requests_total(keyless.client, route, "invalid_fairness_key")
    answer = refused_once(keyless, method, path, {"X-Fairness-Key": "k" * 65})
    assert answer == f"422 {route} outcome=invalid_fairness_key status=422 client=testclient"
    assert requests_total(keyless.client, route, "invalid_fairness_key") == before + 1


@pytest.mark.parametrize("path", ["/tts", "/tts/stream", "/v1/audio/speech"])
def test_a_body_over_the_limit_is_logged_and_counted(keyed: InProcessApp, path: str) -> None:
    route = path.strip("/")
    before = requests_total(keyed.client, route, "body_too_large")
    body = b'{"text": "' + b"a" * MAX_JSON_BODY_BYTES + b'"}'
    answer = refused_once(keyed, "POST", path, {"Authorization": f"Bearer {KEY}"}, body)
    assert answer == f"413 {route} outcome=body_too_large status=413 client=testclient"
    assert requests_total(keyed.client, route, "body_too_large") == before + 1


def test_a_handshake_to_a_draining_node_is_logged_and_counted(keyed: InProcessApp) -> None:
    synthesis = keyed.client.app.state.service.synthesis  # type: ignore[attr-defined]
    before = requests_total(keyed.client, "tts/live/ws", "draining")
    synthesis.draining = True  # what the first SIGTERM sets
    try:
        answer = refused_once(keyed, WEBSOCKET, "/tts/live/ws", {"Authorization": f"Bearer {KEY}"})
    finally:
        synthesis.draining = False
    assert answer == "503 tts/live/ws outcome=draining status=503 client=testclient"
    assert requests_total(keyed.client, "tts/live/ws", "draining") == before + 1


def test_other_refusals_get_their_access_line_and_an_http_count(keyed: InProcessApp) -> None:
    """Not a speech route, or a path under one that no route takes: the access log's line with the request's id,
    and a count by route template, `(none)` where no route takes the path (never the path a client sent)."""
    key = {"Authorization": f"Bearer {KEY}"}
    for method, path, headers, status, route in [
        ("POST", "/voices", {}, 401, "/voices"),
        ("POST", "/tts/nowhere", {}, 401, "(none)"),
        ("POST", "/tts/nowhere", key, 404, "(none)"),
        ("GET", "/no/such/path", key, 404, "(none)"),
        ("GET", "/tts", key, 405, "(none)"),
    ]:
        before = http_requests_total(keyed.client, route, status)
        logged = len(keyed.log())
        sent = keyed.client.request(method, path, headers={**headers, "X-Request-Id": REQUEST_ID})
        assert sent.status_code == status and sent.headers["x-request-id"] == REQUEST_ID
        lines = keyed.log()[logged:].splitlines()
        assert len(lines) == 1 and re.search(rf" {method} {path} {status} [0-9.]+s id={REQUEST_ID}$", lines[0]), lines
        assert http_requests_total(keyed.client, route, status) == before + 1
    metrics = keyed.client.get("/metrics").text
    assert 'route="voices"' not in metrics and "nowhere" not in metrics and "no/such" not in metrics


def test_an_unknown_model_is_logged_and_counted(keyless: InProcessApp) -> None:
    """`model_not_found` is decided by the OpenAI route before the lifecycle runs: still its line and its count."""
    before = requests_total(keyless.client, "v1/audio/speech", "model_not_found")
    body = b'{"model": "tts-9", "input": "hi", "voice": "alloy"}'
    answer = refused_once(keyless, "POST", "/v1/audio/speech", {"Content-Type": "application/json"}, body)
    assert answer == "404 v1/audio/speech outcome=model_not_found status=404 client=testclient"
    assert requests_total(keyless.client, "v1/audio/speech", "model_not_found") == before + 1


def test_a_handshake_no_route_takes_is_logged_and_counted(keyless: InProcessApp) -> None:
    before = http_requests_total(keyless.client, "(none)", 403)
    logged = len(keyless.log())
    with pytest.raises(WebSocketDisconnect):
        with keyless.client.websocket_connect("/tts/websocket", headers={"X-Request-Id": REQUEST_ID}):
            pass
    lines = keyless.log()[logged:].splitlines()
    assert len(lines) == 1 and re.search(rf" WEBSOCKET /tts/websocket 403 [0-9.]+s id={REQUEST_ID}$", lines[0]), lines
    assert http_requests_total(keyless.client, "(none)", 403) == before + 1


@pytest.mark.parametrize("body", [b'{"text": "hi", "timestamps": true}', b'{"text": "hi", "format": "vtt"}'])
def test_timestamps_asked_of_a_stream_are_logged_and_counted(keyless: InProcessApp, body: bytes) -> None:
    """`timestamps_unsupported` is decided by `/tts/stream` before the lifecycle runs: still its line and its count."""
    before = requests_total(keyless.client, "tts/stream", "timestamps_unsupported")
    answer = refused_once(keyless, "POST", "/tts/stream", {"Content-Type": "application/json"}, body)
    assert answer == "422 tts/stream outcome=timestamps_unsupported status=422 client=testclient"
    assert requests_total(keyless.client, "tts/stream", "timestamps_unsupported") == before + 1


@pytest.mark.parametrize("path", ["/tts", "/elevenlabs/v1/text-to-speech/af_heart", "/v1/audio/speech"])
def test_a_401_names_every_way_a_key_is_given(keyed: InProcessApp, path: str) -> None:
    answer = keyed.client.post(path, content=BODIES.get(path, b'{"text": "hi"}'), headers={"xi-api-key": "wrong"})
    assert answer.status_code == 401
    message = json.dumps(answer.json())  # each front's own error shape
    ways = ("Authorization: Bearer <key>", "Authorization: Token <key>", "xi-api-key: <key>", "X-API-Key: <key>")
    for way in (*ways, "`api_key`", "`token` query parameter"):
        assert way in message, message
