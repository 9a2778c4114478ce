"""End to end: the real server process on the embedded Kokoro ONNX model, spoken to over HTTP only: what needs the
process itself (raw sockets, streams timed as they arrive, clients that hang up, start-up, failure, eviction and
restart). What a client sees of the routes is tested in this process, in tests/http/."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from models.assemble import DERIVED_FOLDER
from tests.support.clips import assert_speech_like, wav_clip
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess
from tests.support.voices import clone_form

PARAGRAPH = (
    "Streaming speech should begin quickly. The first chunk is short, so the listener hears it at once. "
    "Later chunks carry whole sentences, packed up to the cap. This paragraph is long enough to need several."
)
LONG_TEXT = " ".join(f"This is sentence number {i} of a long audiobook chapter that goes on." for i in range(40))


# --- uploads --------------------------------------------------------------------------------------------------


def read_reply(sock: socket.socket) -> str:
    """Everything the server sends until it has sent a whole JSON body or closes."""
    reply = b""
    while b"}" not in reply:
        data = sock.recv(65536)
        if not data:
            break
        reply += data
    return reply.decode(errors="replace")


def test_upload_refused_while_streaming_in(server: ServerProcess) -> None:
    """An oversized clip is refused with 413 before the client has finished sending it."""
    boundary = "polyttsboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="engine"\r\n\r\nvoxcpm\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="audio"; filename="big.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            f"POST /voices HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        block = b"\0" * (1 << 20)
        sent = 0
        try:
            for payload in [head] + [block] * 13:  # 13 MiB of a never-finished part: the limit is 12 MiB
                sock.sendall(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                sent += len(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = read_reply(sock)
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert "file_too_large" in reply


def test_declared_oversized_body_refused_at_once(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /voices HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
            b"Content-Length: 104857600\r\n\r\n--b\r\n"
        )
        reply = read_reply(sock)
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert "body_too_large" in reply


# --- synthesis ------------------------------------------------------------------------------------------------


def test_stream_delivers_first_bytes_well_before_last(client: httpx.Client) -> None:
    started = time.perf_counter()
    arrivals: list[tuple[float, int]] = []
    with client.stream("POST", "/tts/stream", json={"text": PARAGRAPH, "language": "en-us"}) as response:
        assert response.status_code == 200
        assert response.headers["x-audio-format"] == "s16le"
        assert response.headers["x-channels"] == "1"
        assert response.headers["x-sample-rate"] == "24000"
        assert response.headers["x-engine"] == "kokoro"
        assert response.headers["x-cache"] == "miss"
        for chunk in response.iter_raw():
            arrivals.append((time.perf_counter() - started, len(chunk)))
    first, last = arrivals[0][0], arrivals[-1][0]
    assert first < 0.5 * last, arrivals
    repeat = client.post("/tts/stream", json={"text": PARAGRAPH, "language": "en-us"})
    assert repeat.headers["x-cache"] == "hit"
    pcm = np.frombuffer(repeat.content, "<i2")
    assert sum(n for _, n in arrivals) == pcm.nbytes
    assert_speech_like(pcm.astype(np.float32) / 32768, 24_000)


# --- operations -----------------------------------------------------------------------------------------------


def test_warming_then_ready(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path).start(wait_ready=False)
    try:
        with server.client() as client:
            first = client.get("/health").json()
            assert first["status"] == "warming"  # bound before the model finished loading
            ready = client.get("/ready")
            tts = client.post("/tts", json={"text": "too early"})
            assert ready.status_code == 503 and "retry-after" in ready.headers
            assert tts.status_code == 503 and tts.json()["code"] == "warming" and "retry-after" in tts.headers
            wait_until(lambda: client.get("/health").json()["status"] != "warming", 60, "the default engine to load")
            assert client.get("/ready").status_code == 200
    finally:
        server.stop()


def test_failed_engine_is_reported_not_fatal_and_retried(tmp_path: Path, assembled_model: Path) -> None:
    model_dir = tmp_path / "model-assembled-later"
    server = ServerProcess(tmp_path, POLYTTS_KOKORO_ONNX_DIR=str(model_dir), POLYTTS_RETRY_AFTER_SECONDS="1").start()
    try:
        with server.client() as client:
            health = client.get("/health").json()
            assert health["status"] == "failed"
            assert "models.assemble" in health["reason"]
            assert client.get("/ready").status_code == 503
            for route in ("/tts", "/tts/stream"):
                response = client.post(route, json={"text": "hello"})
                assert response.status_code == 503 and response.json()["code"] == "engine_failed"
                assert response.headers["retry-after"] == "1"
            # The operator repairs the model; once Retry-After has passed, the next request loads it (until then
            # each is answered `engine_failed` at once).
            shutil.copytree(assembled_model, model_dir, ignore=shutil.ignore_patterns(DERIVED_FOLDER))

            def past_the_failure() -> httpx.Response | None:
                answer = client.post("/tts", json={"text": "Recovered.", "language": "en"})
                failed = answer.status_code == 503 and answer.json()["code"] == "engine_failed"
                return None if failed else answer

            retrying = wait_until(past_the_failure, 60, "Retry-After to pass", interval=0.1)
            assert retrying.status_code == 503 and retrying.json()["code"] == "warming"
            wait_until(lambda: client.get("/health").json()["status"] == "ready", 60, "the repaired model to load")
            response = client.post("/tts", json={"text": "Recovered.", "language": "en"})
            assert response.status_code == 200, response.text
    finally:
        server.stop()


def test_idle_eviction_unloads_the_default_engine(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path, POLYTTS_IDLE_EVICT_SECONDS="1").start()
    try:
        with server.client() as client:
            wait_until(lambda: not client.get("/health").json()["resident"], 20, "the idle engine to be unloaded")
            health = client.get("/health").json()
            assert health["resident"] == []
            assert health["manager"]["units"]["kokoro"]["evictions"] >= 1
            assert client.post("/tts", json={"text": "Back.", "language": "en"}).status_code == 200
    finally:
        server.stop()


def test_busy_then_disconnect_frees_the_gpu_thread(tmp_path: Path, assembled_model: Path) -> None:
    """One synthesis at a time: a second is a 429; a client that hangs up stops its job within one chunk."""
    server = ServerProcess(tmp_path, POLYTTS_MAX_INFLIGHT="1").start()
    try:
        with server.client() as client:
            started = time.perf_counter()
            with client.stream("POST", "/tts/stream", json={"text": LONG_TEXT, "language": "en"}) as long_stream:
                assert long_stream.status_code == 200
                pieces = long_stream.iter_raw()
                next(pieces)
                busy = client.post("/tts", json={"text": "Me too?", "language": "en"})
                assert busy.status_code == 429 and busy.json()["code"] == "server_busy"
                assert int(busy.headers["retry-after"]) >= 1
                long_stream.close()  # hang up after the first chunk
            # The GPU thread must be free again within about one chunk.
            wait_until(lambda: not client.get("/health").json()["inflight"]["running"], 30, "the GPU thread to be free")
            short = client.post("/tts", json={"text": "My turn now.", "language": "en"})
            elapsed = time.perf_counter() - started
            assert short.status_code == 200
        # The whole long text takes minutes on this CPU; it was dropped after about one chunk.
        assert elapsed < 45, elapsed
        assert "outcome=cancelled" in server.log()
    finally:
        server.stop()


def test_a_tts_client_that_gives_up_stops_its_synthesis(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path, POLYTTS_MAX_INFLIGHT="1").start()
    try:
        with httpx.Client(base_url=server.url, timeout=2.0) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                impatient.post("/tts", json={"text": LONG_TEXT, "language": "en"})
        started = time.perf_counter()
        with server.client() as client:
            wait_until(lambda: not client.get("/health").json()["inflight"]["running"], 30, "the GPU thread to be free")
            assert client.post("/tts", json={"text": "Free again.", "language": "en"}).status_code == 200
        assert time.perf_counter() - started < 30
        assert "tts outcome=cancelled" in server.log()
    finally:
        server.stop()


def test_restart_keeps_every_voice(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path).start()
    try:
        with server.client() as client:
            ids = {client.post("/voices", **clone_form(wav_clip(1.0, f))).json()["voice_id"] for f in (200, 300, 400)}
    finally:
        assert server.stop() == 0
    again = ServerProcess(tmp_path).start()
    try:
        with again.client() as client:
            listed = {v["voice_id"] for v in client.get("/voices").json()["voices"] if not v["builtin"]}
            assert listed == ids
            assert set(client.get("/health").json()["voices"]["ids"]) == ids
    finally:
        again.stop()


def test_concurrent_streams_all_complete(client: httpx.Client) -> None:
    results: dict[int, int] = {}

    def run(i: int) -> None:
        response = client.post("/tts/stream", json={"text": f"Request {i} arrives.", "language": "en"})
        results[i] = response.status_code

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {0: 200, 1: 200, 2: 200}
