"""Request ids in this process: every answer carries `X-Request-Id` (the client's own when usable, else a new one),
and the request's log line carries the same id; and `GET /v1/audio/models`, which Open WebUI asks for."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp
from web.request_ids import MAX_REQUEST_ID_CHARS

GENERATED = re.compile(r"^[0-9a-f]{32}$")


def answer_id(client: TestClient, method: str, path: str, **kwargs: object) -> tuple[int, str]:
    response = client.request(method, path, **kwargs)  # type: ignore[arg-type]
    return response.status_code, response.headers["x-request-id"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/health", 200),
        ("GET", "/v1/models", 200),
        ("GET", "/no/such/path", 404),
        ("DELETE", "/tts", 405),
        ("POST", "/tts", 422),
    ],
)
def test_every_answer_carries_a_new_id_when_none_was_sent(
    client: TestClient, method: str, path: str, status: int
) -> None:
    first, second = answer_id(client, method, path), answer_id(client, method, path)
    assert first[0] == second[0] == status
    assert GENERATED.match(first[1]) and GENERATED.match(second[1]) and first[1] != second[1]


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("req_01HZX-trace.id:42", True),
        ("a" * MAX_REQUEST_ID_CHARS, True),
        ("a" * (MAX_REQUEST_ID_CHARS + 1), False),
        ("two words", False),  # a space would split the log line's fields
        ("", False),
    ],
)
def test_a_clients_id_is_kept_when_usable(client: TestClient, given: str, kept: bool) -> None:
    _, answered = answer_id(client, "GET", "/health", headers={"X-Request-Id": given})
    assert answered == given if kept else GENERATED.match(answered)


@pytest.mark.slow
def test_a_speech_requests_line_carries_its_id(app: InProcessApp) -> None:
    logged = len(app.log())
    body = {"model": "tts-1", "input": "Tracing one request.", "voice": "alloy", "response_format": "pcm"}
    response = app.client.post("/v1/audio/speech", json=body, headers={"X-Request-Id": "trace-speech-7"})
    assert response.status_code == 200 and response.headers["x-request-id"] == "trace-speech-7"
    assert len(response.content) > 24_000  # half a second of 24 kHz PCM16 at least
    lines = [line for line in app.log()[logged:].splitlines() if "v1/audio/speech outcome=" in line]
    assert len(lines) == 1 and "outcome=ok" in lines[0] and lines[0].endswith(" id=trace-speech-7"), lines


def test_an_access_line_carries_its_id(app: InProcessApp) -> None:
    logged = len(app.log())
    app.client.get("/voices", headers={"X-Request-Id": "trace-voices-3"})
    lines = app.log()[logged:].splitlines()
    assert len(lines) == 1 and re.search(r" GET /voices 200 [0-9.]+s id=trace-voices-3$", lines[0]), lines


def test_a_websocket_accept_carries_the_id(client: TestClient) -> None:
    with client.websocket_connect(
        "/tts/live/ws", subprotocols=["polytts"], headers={"X-Request-Id": "trace-ws-1"}
    ) as socket:
        assert (b"x-request-id", b"trace-ws-1") in (socket.extra_headers or [])


def test_audio_models_lists_the_speech_models_as_open_webui_reads_them(client: TestClient) -> None:
    """Open WebUI reads `models` (entries with an `id`); OpenAI's list shape is there too, the same as /v1/models."""
    listed = client.get("/v1/audio/models").json()
    assert listed["object"] == "list" and listed["data"] == client.get("/v1/models").json()["data"]
    ids = [model["id"] for model in listed["models"]]
    assert ids[:2] == ["tts-1", "tts-1-hd"] and "kokoro" in ids
    assert listed["models"] == listed["data"]


def test_an_unexpected_error_still_answers_with_the_id(app: InProcessApp, client: TestClient) -> None:
    """Starlette answers an unexpected error (a bug) from outside every middleware: the 500 carries the id too, and
    so does its access line."""

    async def broken() -> None:
        raise RuntimeError("a bug in a route")

    client.app.add_api_route("/broken-for-the-test", broken)  # type: ignore[attr-defined]
    logged = len(app.log())
    status, given = answer_id(client, "GET", "/broken-for-the-test", headers={"X-Request-Id": "trace-bug-5"})
    assert (status, given) == (500, "trace-bug-5")
    assert re.search(r" GET /broken-for-the-test 500 [0-9.]+s id=trace-bug-5$", app.log()[logged:], re.MULTILINE)
    status, generated = answer_id(client, "GET", "/broken-for-the-test")
    assert status == 500 and GENERATED.match(generated)
