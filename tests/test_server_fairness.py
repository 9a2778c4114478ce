"""End to end over HTTP with the real Kokoro engine: fair sharing of the GPU thread, per-key and per-engine limits,
request timings, Prometheus metrics and API keys."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import ServerProcess

LONG = " ".join(f"Paragraph {i} of a long chapter keeps the engine busy for a while." for i in range(12))
SHORT = "Quick answer."


def read_stream(url: str, body: dict, headers: dict, arrivals: list[tuple[float, int]], started: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=120) as client, client.stream(
        "POST", "/tts/stream", json=body, headers=headers
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            arrivals.append((time.perf_counter(), len(chunk)))
            started.set()


def test_a_short_request_is_served_within_about_one_step_of_a_long_one(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path, POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_PCM_CACHE_BYTES="0", POLYTTS_WAV_CACHE_BYTES="0").start()
    try:
        with server.client() as client:
            long_body = {"text": LONG, "language": "en", "max_chars_per_gen": 140}
            arrivals: list[tuple[float, int]] = []
            started = threading.Event()
            reader = threading.Thread(
                target=read_stream, args=(server.url, long_body, {"X-Fairness-Key": "batch"}, arrivals, started)
            )
            reader.start()
            assert started.wait(60)
            submitted = time.perf_counter()
            with client.stream("POST", "/tts/stream", json={"text": SHORT, "language": "en"},
                               headers={"X-Fairness-Key": "interactive"}) as short:  # fmt: skip
                assert short.status_code == 200
                pieces = short.iter_raw()
                next(pieces)
                first_audio = time.perf_counter()
                for _ in pieces:
                    pass
            reader.join(120)
            steps = len(LONG) / 140
            step_bytes = sum(n for _, n in arrivals) / steps
            meanwhile = sum(n for t, n in arrivals if submitted <= t <= first_audio)
            # At most the long request's step under way (and one more piece in flight) before the short one.
            assert meanwhile <= 2.5 * step_bytes, (meanwhile, step_bytes)
            assert arrivals[-1][0] > first_audio  # the long one was still streaming
            keys = client.get("/health").json()["inflight"]["keys"]
            assert keys["batch"]["used_gpu_s"] > keys["interactive"]["used_gpu_s"] > 0
    finally:
        server.stop()


def test_per_key_and_per_engine_limits(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(
        tmp_path, POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_MAX_PENDING_PER_KEY="1", POLYTTS_MAX_PENDING_PER_ENGINE="2",
        POLYTTS_PCM_CACHE_BYTES="0", POLYTTS_WAV_CACHE_BYTES="0",
    ).start()  # fmt: skip
    try:
        with server.client() as a, server.client() as b, server.client() as c:
            body = {"text": LONG, "language": "en"}
            with a.stream("POST", "/tts/stream", json=body, headers={"X-Fairness-Key": "alpha"}) as first:
                first_pieces = first.iter_raw()  # kept: a dropped iterator closes the response
                next(first_pieces)
                again = c.post("/tts", json={"text": SHORT}, headers={"X-Fairness-Key": "alpha"})
                assert again.status_code == 429 and again.json()["code"] == "fairness_key_queue_full"
                assert int(again.headers["retry-after"]) >= 1
                with b.stream("POST", "/tts/stream", json=body, headers={"X-Fairness-Key": "beta"}) as second:
                    second_pieces = second.iter_raw()
                    next(second_pieces)
                    full = c.post("/tts", json={"text": SHORT}, headers={"X-Fairness-Key": "gamma"})
                    assert full.status_code == 429 and full.json()["code"] == "engine_queue_full"
                    stats = c.get("/health").json()["inflight"]
                    admin = c.get("/admin/scheduler").json()
                    assert admin["policy"]["max_pending_per_key"] == 1 and set(admin["keys"]) == set(stats["keys"])
                    assert stats["engines"]["kokoro"]["rejected"] == 2
                    assert stats["keys"]["alpha"]["rejected"] == 1 and stats["keys"]["alpha"]["weight"] == 1.0
        bad = httpx.post(server.url + "/tts", json={"text": SHORT}, headers={"X-Fairness-Key": "x" * 65})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_fairness_key"
    finally:
        server.stop()


def test_timings_and_metrics(server: ServerProcess) -> None:
    with server.client() as client:
        response = client.post("/tts", json={"text": "Timed request.", "language": "en"})
        timing = response.headers["server-timing"]
        for part in ("queue;dur=", "ttfa;dur=", "synth;dur=", "total;dur=", 'chars;desc="14"', "audio;desc=", "rtf;desc="):
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
        ):
            assert line in text, line


@pytest.mark.parametrize("route", ["/tts", "/voices"])
def test_api_keys(tmp_path: Path, assembled_model: Path, route: str) -> None:
    server = ServerProcess(tmp_path, POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_API_KEYS='{"s3cret": "gold"}').start()
    try:
        with server.client() as client:
            call = (lambda **kw: client.post("/tts", json={"text": SHORT}, **kw)) if route == "/tts" else (
                lambda **kw: client.get("/voices", **kw))  # fmt: skip
            refused = call()
            assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"
            assert refused.headers["www-authenticate"] == "Bearer"
            assert call(headers={"Authorization": "Bearer wrong"}).status_code == 401
            # The fairness key is the API key's name; a header cannot claim another identity.
            ok = call(headers={"Authorization": "Bearer s3cret", "X-Fairness-Key": "platinum"})
            assert ok.status_code == 200
            assert client.get("/health").status_code == 200 and client.get("/metrics").status_code == 200
            if route == "/tts":  # the full view of /health needs a key (issue 17); it shows the key's name
                key = {"Authorization": "Bearer s3cret"}
                assert set(client.get("/health", headers=key).json()["inflight"]["keys"]) == {"gold"}
    finally:
        server.stop()
