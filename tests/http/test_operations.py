"""What operators and key holders see, in this process on the embedded Kokoro ONNX default: request timings,
Prometheus metrics, and API keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp

SHORT = "Quick answer."


@pytest.mark.slow
def test_timings_and_metrics(client: TestClient) -> None:
    response = client.post("/tts", json={"text": "Timed request.", "language": "en"})
    timing = response.headers["server-timing"]
    for part in (
        "queue;dur=",
        "ttfa;dur=",
        "synth;dur=",
        "total;dur=",
        'chars;desc="14"',
        "audio;desc=",
        "rtf;desc=",
    ):
        assert part in timing, timing
    client.post("/tts", json={"text": "Timed request.", "language": "en"})  # a cache hit
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for line in (
        'polytts_requests_total{engine="kokoro",outcome="ok",route="tts"}',
        'polytts_time_to_first_audio_seconds_bucket{engine="kokoro"',
        'polytts_real_time_factor_bucket{engine="kokoro"',
        'polytts_cache_lookups_total{result="hit"}',
        'polytts_cache_lookups_total{result="miss"}',
        'polytts_engine_resident{engine="kokoro"} 1.0',
        'polytts_engine_loads_total{engine="kokoro"}',
        'polytts_engine_evictions_total{engine="kokoro"}',
        'polytts_engine_load_seconds_count{engine="kokoro"} 1.0',
        "polytts_queue_depth",
        'polytts_key_gpu_seconds_total{key="anonymous"}',
        'polytts_stream_underrun_seconds_total{engine="kokoro"}',
        'polytts_engine_gpu_seconds_per_audio_second{engine="kokoro"}',
    ):
        assert line in text, line


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    tmp = tmp_path_factory.mktemp("keyed")
    with InProcessApp(tmp, POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_API_KEYS='{"s3cret": "gold"}') as running:
        yield running


@pytest.mark.parametrize("route", ["/tts", "/voices"])
@pytest.mark.slow
def test_api_keys(keyed: InProcessApp, route: str) -> None:
    client = keyed.client
    call = (
        (lambda **kw: client.post("/tts", json={"text": SHORT}, **kw))
        if route == "/tts"
        else (lambda **kw: client.get("/voices", **kw))
    )
    refused = call()
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
    assert refused.headers["www-authenticate"] == "Bearer"
    assert call(headers={"Authorization": "Bearer wrong"}).status_code == 401
    # The fairness key is the API key's name; a header cannot claim another identity.
    ok = call(headers={"Authorization": "Bearer s3cret", "X-Fairness-Key": "platinum"})
    assert ok.status_code == 200
    assert client.get("/health").status_code == 200 and client.get("/metrics").status_code == 200
    if route == "/tts":  # the full view of /health needs a key; it shows the key's name
        key = {"Authorization": "Bearer s3cret"}
        assert set(client.get("/health", headers=key).json()["inflight"]["keys"]) == {"gold"}
