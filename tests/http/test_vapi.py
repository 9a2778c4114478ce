"""The Vapi front in process: a `voice-request` answered with raw s16le mono PCM at its `sampleRate`, the voice the
server URL names, the secret as `X-VAPI-SECRET`, and bad requests answered in its error shape while the node serves
on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp

SECRET = {"X-VAPI-SECRET": "vapi-secret"}
SYNTHESIZE = "/vapi/synthesize"
SENTENCE = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    with InProcessApp(tmp_path_factory.mktemp("vapi"), POLYTTS_API_KEYS='{"vapi-secret": "vapi"}') as running:
        yield running


@pytest.fixture
def client(app: InProcessApp) -> TestClient:
    return app.client


def voice_request(text: str = SENTENCE, rate: Any = 24000, **message: Any) -> dict[str, Any]:
    """What Vapi sends: the message, with the call's metadata beside the text."""
    return {
        "message": {"type": "voice-request", "text": text, "sampleRate": rate, "timestamp": 1767225600, **message},
        "call": {"id": "call-1"},
    }


def test_pcm_at_the_asked_rate_in_the_urls_voice(client: TestClient) -> None:
    native = client.post("/tts/stream", json={"text": SENTENCE, "voice": "bf_emma"}, headers=SECRET).content
    seconds = len(native) / 2 / 24000
    for rate in (8000, 16000, 24000, 44100):
        response = client.post(f"{SYNTHESIZE}?voice=bf_emma", json=voice_request(rate=rate), headers=SECRET)
        assert response.status_code == 200 and response.headers["content-type"] == "application/octet-stream"
        assert response.headers["x-sample-rate"] == str(rate)
        samples = np.frombuffer(response.content, dtype="<i2")
        assert samples.size / rate == pytest.approx(seconds, abs=0.02)
        assert float(np.abs(samples).max()) > 1000
    assert client.post(SYNTHESIZE, json=voice_request(), headers=SECRET).status_code == 200  # the default voice


def error(response: Any) -> dict[str, Any]:
    found = response.json()
    assert set(found) == {"error", "request_id"} and found["request_id"] == response.headers["x-request-id"], found
    return found["error"]


def test_bad_requests_in_its_error_shape(client: TestClient) -> None:
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        (SYNTHESIZE, voice_request(rate=11025), 422, "invalid_output_format"),
        (SYNTHESIZE, voice_request(rate="fast"), 422, "invalid_input"),
        (SYNTHESIZE, voice_request(type="transcript"), 422, "invalid_input"),
        (SYNTHESIZE, voice_request(text=""), 422, "empty_text"),
        (SYNTHESIZE, voice_request(text="word " * 20000), 413, "text_too_long"),
        (SYNTHESIZE, {"text": SENTENCE}, 422, "invalid_input"),
        (f"{SYNTHESIZE}?voice=nobody", voice_request(), 404, "voice_not_found"),
    ]
    for path, body, status, code in cases:
        response = client.post(path, json=body, headers=SECRET)
        assert (response.status_code, error(response)["code"]) == (status, code), body
    wrong = client.post(SYNTHESIZE, json=voice_request(), headers={"X-VAPI-SECRET": "nope"})
    assert wrong.status_code == 401 and "X-VAPI-SECRET: <key>" in error(wrong)["message"]
    assert client.post(SYNTHESIZE, json=voice_request(rate=8000), headers=SECRET).status_code == 200
