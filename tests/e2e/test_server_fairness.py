"""End to end over HTTP with the real Kokoro engine: fair sharing of the GPU thread, per-key, per-engine and
per-address limits while streams are held open, and slow readers. (Request timings, metrics and API keys are tested
in this process, in tests/http/test_operations.py.)"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx

from bench.common import PROBE
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess

LONG = " ".join(f"Paragraph {i} of a long chapter keeps the engine busy for a while." for i in range(12))
SHORT = "Quick answer."


def read_stream(
    url: str, body: dict, headers: dict, arrivals: list[tuple[float, int]], started: threading.Event
) -> None:
    with (
        httpx.Client(base_url=url, timeout=120) as client,
        client.stream("POST", "/tts/stream", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_raw():
            arrivals.append((time.perf_counter(), len(chunk)))
            started.set()


def test_a_short_request_is_served_within_about_one_step_of_a_long_one(tmp_path: Path, assembled_model: Path) -> None:
    # Two streams at once, which a busy machine's engine may not keep in real time: stream admission (checked
    # below) would then rightly refuse the short one, and this test is about the order of their steps.
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_PCM_CACHE_BYTES="0",
        POLYTTS_WAV_CACHE_BYTES="0",
        POLYTTS_STREAM_ADMISSION="false",
    ).start()
    try:
        with server.client() as client:
            # Its first step, then one of about 140 characters, during which the short one arrives, then the last.
            long_text = LONG[: LONG.index("Paragraph 4")]
            # At twice the rate: the order of the steps is checked, by their bytes, and half the audio is half the CPU.
            long_body = {"text": long_text, "language": "en", "max_chars_per_gen": 140, "speed": 2.0}
            arrivals: list[tuple[float, int]] = []
            started = threading.Event()
            reader = threading.Thread(
                target=read_stream, args=(server.url, long_body, {"X-Fairness-Key": "batch"}, arrivals, started)
            )
            reader.start()
            assert started.wait(60)
            submitted = time.perf_counter()
            with client.stream(
                "POST", "/tts/stream", json={"text": SHORT, "language": "en"}, headers={"X-Fairness-Key": "interactive"}
            ) as short:
                assert short.status_code == 200
                pieces = short.iter_raw()
                next(pieces)
                first_audio = time.perf_counter()
                for _ in pieces:
                    pass
            reader.join(120)
            steps = len(long_text) / 140
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
    # Two long streams at once: the real-time capacity bound (tested below) stays out of the way of these two.
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_MAX_PENDING_PER_KEY="1",
        POLYTTS_MAX_PENDING_PER_ENGINE="2",
        POLYTTS_PCM_CACHE_BYTES="0",
        POLYTTS_WAV_CACHE_BYTES="0",
        POLYTTS_STREAM_ADMISSION="false",
    ).start()
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
                    assert "gamma" not in stats["keys"] and stats["keys"]["(other)"]["rejected"] == 1  # no state
        bad = PROBE.post(server.url + "/tts", json={"text": SHORT}, headers={"X-Fairness-Key": "x" * 65})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_fairness_key"
    finally:
        server.stop()


PATIENT = " ".join(["Hold the line, please."] * 30)
"""One-sentence steps of ~1.5 s of audio (72 KB: more than the server's send buffers and the reader's receive buffer
take at once), and enough of them never to finish while the reader crawls."""


class SlowReader(threading.Thread):
    """A raw HTTP client that streams a long text and reads its response at 1 KB/s through a small receive buffer."""

    def __init__(self, port: int, key: str) -> None:
        super().__init__(daemon=True)
        self.port, self.key = port, key
        self.status: int | None = None
        self.head = b""
        self.answered = threading.Event()
        self.stop = threading.Event()
        self.received = 0

    def run(self) -> None:
        body = json.dumps({"text": PATIENT, "language": "en", "max_sentences_per_gen": 1}).encode()
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(300)
            sock.connect(("127.0.0.1", self.port))
            head = b"POST /tts/stream HTTP/1.1\r\nHost: polytts\r\nContent-Type: application/json\r\n"
            head += f"X-Fairness-Key: {self.key}\r\n".encode()
            sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            first = self.head = sock.recv(1024)
            self.status = int(first.split()[1])
            self.received = len(first)
            self.answered.set()
            while not self.stop.wait(1.0):
                self.received += len(sock.recv(1024))


def test_a_fresh_client_is_admitted_while_16_slow_readers_are_connected(tmp_path: Path, assembled_model: Path) -> None:
    # The readers would all be refused as streams beyond the real-time capacity on this machine; with that bound
    # off they take every slot at once, as in the lock-out the slot release exists for.
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_MAX_INFLIGHT="16",
        POLYTTS_MAX_CLIENT_SHARE="1",
        POLYTTS_STREAM_ADMISSION="false",
        POLYTTS_SLOW_READER_LAG_S="1",
        POLYTTS_READER_IDLE_LIMIT_S="600",
        POLYTTS_MAX_BUFFERED_PIECES="1",
        POLYTTS_SEND_BUFFER_BYTES="16384",
        POLYTTS_PCM_CACHE_BYTES="0",
        POLYTTS_WAV_CACHE_BYTES="0",
    ).start()
    readers = [SlowReader(server.port, f"reader-{i}") for i in range(16)]
    try:
        for reader in readers:
            reader.start()
        for reader in readers:
            assert reader.answered.wait(300) and reader.status == 200, reader.head
        with server.client() as client:
            wait_until(
                lambda: client.get("/health").json()["inflight"]["detached"] >= 16,
                300,
                "all 16 readers' responses to be detached",
                interval=0.2,
                detail=lambda: client.get("/health").json()["inflight"],
            )
            with client.stream("POST", "/tts/stream", json={"text": SHORT, "language": "en"}) as fresh:
                assert fresh.status_code == 200
                audio = b"".join(fresh.iter_raw())
            assert len(audio) > 0 and all(reader.is_alive() for reader in readers)  # all 16 still connected
            inflight = client.get("/health").json()["inflight"]
            assert inflight["detached"] == 16 and inflight["rejected"] == 0
            metrics = client.get("/metrics").text
            assert "polytts_responses_detached 16.0" in metrics
        assert "detached: its reader is" in server.log()
        assert "tts/stream outcome=ok" in server.log() and "underrun=" in server.log()
    finally:
        for reader in readers:
            reader.stop.set()
        server.stop()


def test_one_client_address_holds_at_most_its_share_of_the_slots(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_MAX_INFLIGHT="2",
        POLYTTS_MAX_CLIENT_SHARE="0.5",
        POLYTTS_PCM_CACHE_BYTES="0",
        POLYTTS_WAV_CACHE_BYTES="0",
    ).start()
    try:
        with (
            server.client() as client,
            client.stream(
                "POST", "/tts/stream", json={"text": LONG, "language": "en"}, headers={"X-Fairness-Key": "one"}
            ) as held,
        ):
            pieces = held.iter_raw()  # kept: a dropped iterator closes the response
            next(pieces)
            for key in ("one", "two"):  # the address is full, whatever the key
                refused = PROBE.post(server.url + "/tts", json={"text": SHORT}, headers={"X-Fairness-Key": key})
                assert refused.status_code == 429 and refused.json()["code"] == "client_queue_full"
                assert int(refused.headers["retry-after"]) >= 1 and "at most 1" in refused.json()["message"]
            assert client.get("/health").json()["inflight"]["rejected"] == 2
    finally:
        server.stop()


def test_rejected_random_keys_leave_no_state_and_key_labels_are_capped(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_MAX_INFLIGHT="1",
        POLYTTS_MAX_KEY_LABELS="4",
        POLYTTS_PCM_CACHE_BYTES="0",
        POLYTTS_WAV_CACHE_BYTES="0",
    ).start()
    try:
        with server.client() as client:
            for i in range(6):  # admitted keys, one after the other: listed up to the cap, the rest summed
                user = {"X-Fairness-Key": f"user-{i}"}
                assert client.post("/tts", json={"text": "Hi."}, headers=user).status_code == 200
            before = len(client.get("/metrics").text)
            with client.stream("POST", "/tts/stream", json={"text": LONG, "language": "en"}) as held:
                assert held.status_code == 200
                pieces = held.iter_raw()
                next(pieces)
                with httpx.Client(base_url=server.url, timeout=30) as other:
                    for _ in range(300):
                        stranger = {"X-Fairness-Key": uuid.uuid4().hex}
                        assert other.post("/tts", json={"text": SHORT}, headers=stranger).status_code == 429
                inflight = client.get("/health").json()["inflight"]
                metrics = client.get("/metrics").text
        keys = inflight["keys"]
        assert len(keys) == 5 and "(other)" in keys and keys["(other)"]["rejected"] == 300
        assert inflight["rejected"] == 300
        assert metrics.count("polytts_key_gpu_seconds_total{") == 5  # four keys and "(other)"
        assert len(metrics) - before < 1500, len(metrics) - before  # a few more series, not one per key
        assert 'polytts_admission_rejections_total{code="server_busy"} 300.0' in metrics
    finally:
        server.stop()
