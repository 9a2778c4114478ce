"""End to end: the real server process on the embedded Kokoro ONNX model, spoken to over HTTP only."""

from __future__ import annotations

import base64
import io
import shutil
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.support.clips import wav_clip
from tests.support.servers import ServerProcess

SENTENCE = "The quick brown fox jumps over the lazy dog."
PARAGRAPH = (
    "Streaming speech should begin quickly. The first chunk is short, so the listener hears it at once. "
    "Later chunks carry whole sentences, packed up to the cap. This paragraph is long enough to need several."
)
LONG_TEXT = " ".join(f"This is sentence number {i} of a long audiobook chapter that goes on." for i in range(40))


def clone_form(audio: bytes, ref_text: str = "a reference transcript", **fields: str) -> dict:
    """A registration for `qwen`, a cloning engine this node does not serve (voices are portable)."""
    return {
        "files": {"audio": ("ref.wav", audio, "audio/wav")},
        "data": {"engine": "qwen", "ref_text": ref_text, **fields},
    }


def decode_wav(body: bytes) -> tuple[np.ndarray, int]:
    samples, rate = sf.read(io.BytesIO(body), dtype="float32")
    return samples, rate


def assert_speech_like(samples: np.ndarray, rate: int) -> None:
    """Not silence, not clipped, and shaped like speech: loud and quiet 20 ms frames alternate."""
    assert np.sqrt(np.mean(samples**2)) > 0.01, "silence"
    assert np.mean(np.abs(samples) > 0.999) < 0.001, "clipped"
    frames = samples[: len(samples) // (rate // 50) * (rate // 50)].reshape(-1, rate // 50)
    energy = np.sqrt(np.mean(frames**2, axis=1))
    assert energy.std() / energy.mean() > 0.5, "flat energy: not speech-like"
    crossings = np.mean(np.abs(np.diff(np.signbit(samples).astype(np.int8))))
    assert 0.01 < crossings < 0.5, f"zero-crossing rate {crossings} is not speech-like"


# --- voices ---------------------------------------------------------------------------------------------------


def test_register_list_get_delete(client: httpx.Client) -> None:
    clip = wav_clip(1.5, 330)
    created = client.post("/voices", **clone_form(clip))
    assert created.status_code == 201, created.text
    voice_id = created.json()["voice_id"]
    assert len(voice_id) == 16 and created.json()["created"] is True

    again = client.post("/voices", **clone_form(clip))
    assert again.status_code == 200 and again.json() == {"voice_id": voice_id, "created": False}

    listed = {v["voice_id"]: v for v in client.get("/voices").json()["voices"]}
    assert listed[voice_id]["engine"] == "qwen"
    assert listed[voice_id]["ref_text"] == "a reference transcript"
    assert listed[voice_id]["servable"] is False  # stored for portability; this node has no Qwen3-TTS
    assert listed["jf_alpha"]["builtin"] is True and listed["jf_alpha"]["engine"] == "kokoro"

    got = client.get(f"/voices/{voice_id}")
    assert got.status_code == 200 and got.json()["duration_s"] == pytest.approx(1.5, abs=0.01)
    assert client.get("/voices/jf_alpha").json()["language"] == "ja"

    conflict = client.post("/voices", **clone_form(clip, ref_text="another transcript"))
    assert conflict.status_code == 409 and conflict.json()["code"] == "voice_exists"
    replaced = client.post("/voices", **clone_form(clip, ref_text="another transcript", replace="true"))
    assert replaced.status_code == 201
    assert client.get(f"/voices/{voice_id}").json()["ref_text"] == "another transcript"

    assert client.delete(f"/voices/{voice_id}").json() == {"deleted": voice_id}
    assert client.get(f"/voices/{voice_id}").status_code == 404
    assert client.delete(f"/voices/{voice_id}").status_code == 404
    assert client.delete("/voices/jf_alpha").status_code == 409


def test_voice_id_vectors_over_http(client: httpx.Client) -> None:
    form = {"files": {"audio": ("a.bin", b"polytts-test-audio")}, "data": {"engine": "voxcpm", "ref_text": "x"}}
    # These bytes do not decode as audio, so the id cannot be registered; the vector is pinned in test_registry.
    refused = client.post("/voices", **form)
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_audio"


@pytest.mark.parametrize(
    ("form", "status", "code"),
    [
        (
            {"files": {"seed_audio": ("s.wav", wav_clip())}, "data": {"engine": "voxcpm", "ref_text": "x"}},
            422,
            "audio_required",
        ),
        ({"files": {"audio": ("a.wav", wav_clip())}, "data": {"ref_text": "x"}}, 422, "engine_required"),
        (
            {"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "nope", "ref_text": "x"}},
            422,
            "unknown_engine",
        ),
        ({"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "kokoro"}}, 422, "engine_cannot_clone"),
        ({"files": {"audio": ("a.wav", b"")}, "data": {"engine": "voxcpm", "ref_text": "x"}}, 422, "invalid_audio"),
        (
            {"files": {"audio": ("a.wav", wav_clip(0.1))}, "data": {"engine": "voxcpm", "ref_text": "x"}},
            422,
            "audio_duration",
        ),
        ({"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "voxcpm"}}, 422, "ref_text_required"),
        (
            {"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "voxcpm", "x_vector_only_mode": "maybe"}},
            422,
            "invalid_field",
        ),
    ],
)
def test_registration_errors(client: httpx.Client, server: ServerProcess, form: dict, status: int, code: str) -> None:
    before = sorted(p.name for p in (server.tmp / "voices").iterdir())
    response = client.post("/voices", **form)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code
    if code == "engine_cannot_clone":
        assert "built-in" in response.json()["message"]
    assert sorted(p.name for p in (server.tmp / "voices").iterdir()) == before


def test_registration_not_multipart(client: httpx.Client) -> None:
    response = client.post("/voices", json={"engine": "voxcpm"})
    assert response.status_code == 415 and response.json()["code"] == "expected_multipart"


def test_seeded_and_xvector_registrations(client: httpx.Client) -> None:
    clip = wav_clip(1.2, 440)
    xvec = client.post("/voices", **clone_form(clip, ref_text="", x_vector_only_mode="true"))
    seeded = client.post(
        "/voices",
        files={"audio": ("a.wav", clip), "seed_audio": ("s.wav", wav_clip(1.0, 550))},
        data={"engine": "voxcpm", "ref_text": "hello", "seed_text": "你好"},
    )
    assert xvec.status_code == 201 and seeded.status_code == 201
    assert xvec.json()["voice_id"] != seeded.json()["voice_id"]
    meta = client.get(f"/voices/{seeded.json()['voice_id']}").json()
    assert meta["seed_text"] == "你好" and meta["has_seed_audio"] is True
    assert client.get(f"/voices/{xvec.json()['voice_id']}").json()["x_vector_only_mode"] is True


def test_invalid_voice_ids_never_reach_the_disk(client: httpx.Client) -> None:
    for bad in ("..%2F..%2Fetc", "ABCDEF0123456789", "0123456789abcde", "0123456789abcdef0"):
        response = client.get(f"/voices/{bad}")
        assert response.status_code in (404, 422), bad
        assert response.status_code != 200
    # A name that is neither a built-in nor an id names no voice (issue 9); deleting one is a malformed id.
    assert client.get("/voices/0123456789abcdeg").json()["code"] == "voice_not_found"
    assert client.delete("/voices/0123456789abcdeg").json()["code"] == "invalid_voice_id"
    assert client.delete("/voices/NOT-AN-ID").json()["code"] == "invalid_voice_id"


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


def test_tts_returns_speech_whose_duration_fits_the_text(client: httpx.Client) -> None:
    response = client.post("/tts", json={"text": SENTENCE, "language": "en"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/wav"
    assert response.headers["x-engine"] == "kokoro" and response.headers["x-sample-rate"] == "24000"
    samples, rate = decode_wav(response.content)
    assert rate == 24_000
    seconds = len(samples) / rate
    assert 0.04 * len(SENTENCE) < seconds < 0.2 * len(SENTENCE), seconds
    assert_speech_like(samples, rate)


def test_repeat_is_a_cache_hit(client: httpx.Client) -> None:
    body = {"text": "Caching makes a repeat instant.", "language": "English", "speed": 1.1}
    first = client.post("/tts", json=body)
    second = client.post("/tts", json=body)
    assert first.headers["x-cache"] == "miss" and second.headers["x-cache"] == "hit"
    assert first.content == second.content
    streamed = client.post("/tts/stream", json=body)
    assert streamed.headers["x-cache"] == "hit"
    assert streamed.content == first.content[44:]
    other_speed = client.post("/tts", json={**body, "speed": 1.2})
    assert other_speed.headers["x-cache"] == "miss"


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


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"text": "hi", "voice_id": "0123456789abcdef"}, 404, "voice_not_found"),
        ({"text": "hi", "voice_id": "no_such_voice"}, 404, "voice_not_found"),
        ({"text": "hi", "speed": 5}, 422, "invalid_input"),
        ({"text": "hi", "unknown_field": 1}, 422, "invalid_input"),
        ({"voice_id": "jf_alpha"}, 422, "invalid_input"),
        ({"text": "   "}, 422, "empty_text"),
        ({"text": "hi", "language": "klingon"}, 422, "unsupported_language"),
        ({"text": "こんにちは", "language": "ja"}, 422, "language_not_installed"),
        ({"text": "x" * 5001}, 413, "text_too_long"),
    ],
)
@pytest.mark.parametrize("route", ["/tts", "/tts/stream"])
def test_client_errors_are_decided_before_the_first_byte(
    client: httpx.Client, route: str, body: dict, status: int, code: str
) -> None:
    response = client.post(route, json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["code"] == code
    if code == "language_not_installed":
        assert "pyopenjtalk-plus" in response.json()["message"]


@pytest.mark.parametrize(
    ("content", "status", "code", "says"),
    [
        (b'{"text": "lone \\ud800 surrogate"}', 422, "invalid_text", "surrogate"),
        ('{"text": "\u200b\u200c\u200d\u2060\ufeff"}'.encode(), 422, "empty_text", "nothing to speak"),
        (b"this is not json", 422, "invalid_input", "not valid JSON"),
        (b'{"text": "hi", "max_chars_per_gen": 1}', 422, "invalid_input", "at least"),
    ],
    ids=["surrogate", "zero-width", "not-json", "tiny-cap"],
)
def test_hostile_bodies_get_clear_client_errors(
    client: httpx.Client, content: bytes, status: int, code: str, says: str
) -> None:
    response = client.post("/tts", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert response.json()["code"] == code and says in response.json()["message"]
    assert '"8"' not in response.text  # a JSON error position is not presented as a field


def test_a_huge_voice_name_is_not_echoed_back(client: httpx.Client) -> None:
    name = "v" * 1_000_000
    response = client.post("/tts", json={"text": "hi", "voice_id": name})
    assert response.status_code == 404 and response.json()["code"] == "voice_not_found"
    assert len(response.text) < 1000


def test_refused_requests_are_logged_and_counted(client: httpx.Client, server: ServerProcess) -> None:
    assert client.post("/tts", json={"text": "hi", "voice_id": "no_such_voice_here"}).status_code == 404
    assert client.post("/tts/stream", content=b"{", headers={"content-type": "application/json"}).status_code == 422
    metrics = client.get("/metrics").text
    assert 'polytts_requests_total{engine="none",outcome="voice_not_found",route="tts"} ' in metrics
    assert 'polytts_requests_total{engine="none",outcome="invalid_input",route="tts/stream"} ' in metrics
    log = server.log()
    assert "tts outcome=voice_not_found engine=-" in log and "tts/stream outcome=invalid_input" in log


def test_voice_of_an_engine_this_node_lacks_is_a_422(client: httpx.Client) -> None:
    voice_id = client.post("/voices", **clone_form(wav_clip(1.1, 600))).json()["voice_id"]
    for route in ("/tts", "/tts/stream"):
        response = client.post(route, json={"text": "hello", "voice_id": voice_id})
        assert response.status_code == 422 and response.json()["code"] == "engine_unavailable"
        assert "qwen" in response.json()["message"]


# --- operations -----------------------------------------------------------------------------------------------


def test_health_ready_and_unload(client: httpx.Client) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ready"
    assert health["device"] == "cpu"
    assert health["engines"]["kokoro"]["backend"] == "onnx"
    assert health["limits"]["max_upload_bytes"] == 12_582_912
    assert "jf_alpha" in health["voices"]["builtin"]
    assert set(health["caches"]) == {"wav", "pcm"}
    assert {"running", "waiting"} <= set(health["inflight"])
    assert client.get("/ready").status_code == 200

    client.post("/tts", json={"text": "Load me.", "language": "en"})
    assert [r["engine"] for r in client.get("/health").json()["resident"]] == ["kokoro"]
    assert client.post("/model/unload").json() == {"unloaded": ["kokoro"]}
    health = client.get("/health").json()
    assert health["resident"] == [] and health["status"] == "ready"
    # The next request loads it again on demand.
    assert client.post("/tts", json={"text": "And back again.", "language": "en"}).status_code == 200
    assert [r["engine"] for r in client.get("/health").json()["resident"]] == ["kokoro"]
    assert client.post("/model/unload", params={"engine": "nope"}).status_code == 422


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
            deadline = time.monotonic() + 60
            while client.get("/health").json()["status"] == "warming" and time.monotonic() < deadline:
                time.sleep(0.1)
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
            # The operator repairs the model; after Retry-After the next request loads it.
            shutil.copytree(assembled_model, model_dir)
            time.sleep(1.1)
            retrying = client.post("/tts", json={"text": "Recovered.", "language": "en"})
            assert retrying.status_code == 503 and retrying.json()["code"] == "warming"
            deadline = time.monotonic() + 60
            while client.get("/health").json()["status"] != "ready" and time.monotonic() < deadline:
                time.sleep(0.2)
            response = client.post("/tts", json={"text": "Recovered.", "language": "en"})
            assert response.status_code == 200, response.text
    finally:
        server.stop()


def test_idle_eviction_unloads_the_default_engine(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path, POLYTTS_IDLE_EVICT_SECONDS="1").start()
    try:
        with server.client() as client:
            deadline = time.monotonic() + 20
            while client.get("/health").json()["resident"] and time.monotonic() < deadline:
                time.sleep(0.2)
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
            deadline = time.monotonic() + 30
            while client.get("/health").json()["inflight"]["running"] and time.monotonic() < deadline:
                time.sleep(0.1)
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
            while client.get("/health").json()["inflight"]["running"] and time.perf_counter() - started < 30:
                time.sleep(0.1)
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


# --- word timings ---------------------------------------------------------------------------------------------


def test_tts_with_timestamps_returns_audio_and_every_word(client: httpx.Client) -> None:
    text = "Dr. Smith paid $3.50 for two coffees, then left."
    answer = client.post("/tts", json={"text": text, "timestamps": True, "format": "wav"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    body = answer.json()
    samples, rate = decode_wav(base64.b64decode(body["audio"]))
    assert body["format"] == "wav" and body["sample_rate"] == rate == 24_000
    words = body["words"]
    assert [w["word"] for w in words] == text.split()
    assert all(0 <= w["start"] < w["end"] <= len(samples) / rate + 1e-3 for w in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)


@pytest.mark.parametrize(
    ("fmt", "media", "first_line"), [("vtt", "text/vtt", "WEBVTT"), ("srt", "application/x-subrip", "1")]
)
def test_tts_captions(client: httpx.Client, fmt: str, media: str, first_line: str) -> None:
    answer = client.post("/tts", json={"text": "Captions follow the words. They come in cues.", "format": fmt})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith(media)
    assert answer.text.splitlines()[0] == first_line and "-->" in answer.text and "Captions" in answer.text


def test_timestamps_where_no_engine_can_time_words(client: httpx.Client) -> None:
    refused = client.post("/tts/stream", json={"text": "hi", "timestamps": True})
    assert refused.status_code == 422 and refused.json()["code"] == "timestamps_unsupported"
    voice = client.post(
        "/voices",
        files={"audio": ("r.wav", wav_clip(1.3, 410), "audio/wav")},
        data={"engine": "voxcpm", "ref_text": "a reference"},
    ).json()["voice_id"]
    answer = client.post("/tts", json={"text": "hi", "voice_id": voice, "timestamps": True})
    assert answer.status_code == 422 and answer.json()["code"] == "timestamps_unsupported"
