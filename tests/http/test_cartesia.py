"""The Cartesia front in process: output formats (raw encodings, WAV, MP3) at their rates, SSE events with word
timestamps, the key as `X-API-Key`, Cartesia's error shape, and the WebSocket's contexts: `continue`, `flush` answered
by `flush_done`, `cancel`, `done`, and the live-session places they hold."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from bench import asr
from tests.support.apps import InProcessApp
from tests.support.openapi import assert_documented_events
from tests.support.polling import wait_until
from tests.support.servers import outcomes

KEY = {"X-API-Key": "sk-ca", "Cartesia-Version": "2025-04-16"}
BASE = "/cartesia/tts"
SENTENCE = "Hello there, how are you today?"
VOICE = {"mode": "id", "id": "af_heart"}


def raw(encoding: str = "pcm_s16le", rate: int = 24000, container: str = "raw") -> dict[str, Any]:
    return {"container": container, "encoding": encoding, "sample_rate": rate}


def body(**fields: Any) -> dict[str, Any]:
    return {"model_id": "sonic-2", "transcript": SENTENCE, "voice": VOICE, "output_format": raw(), **fields}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    with InProcessApp(tmp_path_factory.mktemp("cartesia"), POLYTTS_API_KEYS='{"sk-ca": "cartesia"}') as running:
        yield running


@pytest.fixture
def client(app: InProcessApp) -> TestClient:
    return app.client


@pytest.fixture(scope="module")
def seconds(app: InProcessApp) -> float:
    """How long the sentence is on the native route."""
    native = app.client.post("/tts/stream", json={"text": SENTENCE, "voice": "af_heart"}, headers=KEY)
    return len(native.content) / 2 / 24_000


def loud(samples: np.ndarray) -> bool:
    return float(np.sqrt(np.mean(np.asarray(samples, dtype=np.float64) ** 2))) > 0.01 * (
        1.0 if samples.dtype.kind == "f" else 32768
    )


def test_raw_encodings_at_the_rate_asked(client: TestClient, seconds: float) -> None:
    encodings = [("pcm_s16le", "<i2", 2), ("pcm_f32le", "<f4", 4), ("pcm_mulaw", "u1", 1), ("pcm_alaw", "u1", 1)]
    for encoding, dtype, width in encodings:
        for rate in (8000, 16000, 44100):
            response = client.post(f"{BASE}/bytes", json=body(output_format=raw(encoding, rate)), headers=KEY)
            assert response.status_code == 200, response.text
            assert response.headers["x-sample-rate"] == str(rate)
            samples = np.frombuffer(response.content, dtype=dtype)
            assert samples.size / rate == pytest.approx(seconds, abs=0.02), (encoding, rate)
            assert len(response.content) == samples.size * width
            if width > 1:  # G.711's bytes are not samples to measure
                assert loud(samples)
                assert np.abs(samples).max() <= (1.0 if dtype == "<f4" else 32767)


def test_wav_in_each_encoding_reads_back(client: TestClient, seconds: float) -> None:
    for encoding, subtype in [
        ("pcm_s16le", "PCM_16"),
        ("pcm_f32le", "FLOAT"),
        ("pcm_mulaw", "ULAW"),
        ("pcm_alaw", "ALAW"),
    ]:
        response = client.post(f"{BASE}/bytes", json=body(output_format=raw(encoding, 22050, "wav")), headers=KEY)
        assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
        info = soundfile.info(io.BytesIO(response.content))
        assert (info.samplerate, info.subtype) == (22050, subtype)
        samples, _ = soundfile.read(io.BytesIO(response.content), dtype="float32")
        assert samples.size / 22050 == pytest.approx(seconds, abs=0.03) and loud(samples)


def test_mp3_at_its_rate_and_bit_rate(client: TestClient, seconds: float) -> None:
    mp3 = {"container": "mp3", "sample_rate": 44100, "bit_rate": 64000}
    response = client.post(f"{BASE}/bytes", json=body(output_format=mp3), headers=KEY)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/mpeg"
    with av.open(io.BytesIO(response.content), mode="r") as container:
        stream = container.streams.audio[0]
        assert stream.sample_rate == 44100 and stream.bit_rate == 64000
        decoded = sum(frame.samples for frame in container.decode(audio=0))
    assert decoded / 44100 == pytest.approx(seconds, abs=0.1)


@pytest.mark.slow
def test_speed_and_ignored_fields(client: TestClient, seconds: float) -> None:
    fast = body(generation_config={"speed": 1.5, "volume": 1.2, "emotion": "calm"}, add_phoneme_timestamps=True)
    response = client.post(f"{BASE}/bytes", json=fast, headers=KEY)
    assert response.status_code == 200
    assert len(response.content) / 2 / 24000 < seconds * 0.8
    assert response.headers["x-ignored-parameters"] == (
        "add_phoneme_timestamps, generation_config.volume, generation_config.emotion"
    )
    named = client.post(f"{BASE}/bytes", json=body(speed="slow", voice="af_heart"), headers=KEY)
    assert len(named.content) / 2 / 24000 > seconds * 1.1


def sse_events(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        event = json.loads(lines["data"])
        assert lines["event"] == event["type"]
        events.append(event)
    return events


def test_sse_sends_chunks_timestamps_then_done(client: TestClient, seconds: float) -> None:
    response = client.post(f"{BASE}/sse", json=body(add_timestamps=True, context_id="turn-1"), headers=KEY)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == {"type": "done", "done": True, "status_code": 200, "context_id": "turn-1"}
    assert_documented_events(client.get("/openapi.json").json(), f"{BASE}/sse", "post", response.text)
    audio = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk")
    assert len(audio) / 2 / 24000 == pytest.approx(seconds, abs=0.02)
    assert all(e["step_time"] >= 0 for e in events if e["type"] == "chunk")
    stamps = [e["word_timestamps"] for e in events if e["type"] == "timestamps"]
    words = [word for stamp in stamps for word in stamp["words"]]
    assert " ".join(words) == SENTENCE
    starts = [t for stamp in stamps for t in stamp["start"]]
    ends = [t for stamp in stamps for t in stamp["end"]]
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
    assert 0 <= starts[0] and ends[-1] <= seconds + 0.01


def error(response: Any) -> dict[str, Any]:
    found = response.json()
    assert set(found) == {"error_code", "title", "message", "request_id"}, found
    assert found["request_id"] == response.headers["x-request-id"]
    return found


def test_bad_input_answers_in_cartesia_shape(client: TestClient) -> None:
    cases = [
        (body(voice={"mode": "id", "id": "nobody"}), 404, "voice_not_found"),
        (body(voice={"mode": "embedding", "embedding": [0.1]}), 422, "unsupported_voice_mode"),
        (body(output_format=raw(rate=12345)), 422, "invalid_output_format"),
        (body(output_format={"container": "raw", "sample_rate": 16000}), 422, "invalid_output_format"),
        (body(output_format={"container": "ogg", "sample_rate": 16000}), 422, "invalid_input"),
        (body(model_id="whisper-1"), 404, "model_not_found"),
        (body(transcript=""), 422, "empty_text"),
        (body(transcript="word " * 20000), 413, "text_too_long"),
        ({"transcript": SENTENCE}, 422, "invalid_input"),
    ]
    for sent, status, code in cases:
        response = client.post(f"{BASE}/bytes", json=sent, headers=KEY)
        assert (response.status_code, error(response)["error_code"]) == (status, code), sent
    sse = client.post(f"{BASE}/sse", json=body(output_format=raw(container="wav")), headers=KEY)
    assert sse.status_code == 422 and error(sse)["error_code"] == "invalid_output_format"
    malformed = client.post(f"{BASE}/bytes", content=b"{not json", headers={**KEY, "content-type": "application/json"})
    assert malformed.status_code == 422 and error(malformed)["title"] == HTTPStatus(422).phrase
    wrong_key = client.post(f"{BASE}/bytes", json=body(), headers={"X-API-Key": "nope"})
    assert wrong_key.status_code == 401 and error(wrong_key)["error_code"] == "unauthorized"
    assert client.get(f"{BASE}/websocket", headers=KEY).status_code == 426


# --- the WebSocket ------------------------------------------------------------------------------------------------


def socket_url(key: str = "sk-ca") -> str:
    return f"{BASE}/websocket?api_key={key}&cartesia_version=2025-04-16"


def message(context_id: str, transcript: str, **fields: Any) -> dict[str, Any]:
    return {**body(transcript=transcript, output_format=raw(rate=16000)), "context_id": context_id, **fields}


def until_done(ws: WebSocketTestSession, contexts: int = 1) -> list[dict[str, Any]]:
    received = []
    while contexts:
        event = ws.receive_json()
        received.append(event)
        contexts -= event["type"] in ("done", "error")
    return received


def audio_of(events: list[dict[str, Any]], context: str) -> bytes:
    return b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk" and e["context_id"] == context)


@pytest.mark.slow
def test_a_context_streams_with_continue_then_done(client: TestClient) -> None:
    with client.websocket_connect(socket_url()) as ws:
        for token in ("Hello ", "there, ", "how ", "are ", "you?"):
            ws.send_json(message("c1", token, add_timestamps=True, **{"continue": True}))
        ws.send_json(message("c1", "", **{"continue": False}))
        events = until_done(ws)
    assert events[-1] == {"type": "done", "context_id": "c1", "done": True, "status_code": 200}
    samples = np.frombuffer(audio_of(events, "c1"), dtype="<i2")
    assert samples.size / 16000 > 0.8 and loud(samples)
    stamps = [e["word_timestamps"] for e in events if e["type"] == "timestamps"]
    assert " ".join(w for s in stamps for w in s["words"]) == "Hello there, how are you?"
    assert max(t for s in stamps for t in s["end"]) <= samples.size / 16000 + 0.01


@pytest.mark.slow
def test_flushes_are_answered_after_their_audio(client: TestClient) -> None:
    with client.websocket_connect(socket_url()) as ws:
        ws.send_json(message("f", "The first part is here", **{"continue": True}))
        ws.send_json(message("f", "", flush=True, **{"continue": True}))
        first = [ws.receive_json()]
        while first[-1]["type"] != "flush_done":
            first.append(ws.receive_json())
        ws.send_json(message("f", "", flush=True, **{"continue": True}))  # nothing new: answered at once
        assert ws.receive_json() == {
            "type": "flush_done",
            "done": False,
            "flush_done": True,
            "flush_id": 2,
            "context_id": "f",
            "status_code": 200,
        }
        ws.send_json(message("f", "and the second part.", **{"continue": False}))
        rest = until_done(ws)
    assert first[-1]["flush_id"] == 1 and len(audio_of(first, "f")) / 2 / 16000 > 0.8
    assert {e["flush_id"] for e in first if e["type"] == "chunk"} == {1}
    assert {e["flush_id"] for e in rest if e["type"] == "chunk"} == {3}
    assert len(audio_of(rest, "f")) / 2 / 16000 > 0.6


@pytest.mark.slow
def test_contexts_share_a_socket_and_cancel_stops_one(client: TestClient, app: InProcessApp) -> None:
    long = "This is a long answer that the listener interrupts before it is over. " * 6
    with client.websocket_connect(socket_url()) as ws:
        ws.send_json(message("long", long, **{"continue": True}))
        ws.send_json(message("short", "A short one."))
        seen: list[dict[str, Any]] = []
        cancelled = False
        while not (cancelled and any(e["type"] == "done" for e in seen)):
            seen.append(ws.receive_json())
            if not cancelled and seen[-1]["type"] == "chunk" and seen[-1]["context_id"] == "long":
                ws.send_json({"context_id": "long", "cancel": True})  # the listener barges in
                cancelled = True
        ws.send_json(message("short", "Again."))
        reused = ws.receive_json()
    assert seen[-1]["type"] == "done" and seen[-1]["context_id"] == "short"
    assert not any(e["type"] == "done" and e["context_id"] == "long" for e in seen)
    assert len(audio_of(seen, "long")) / 2 / 16000 < 8  # far less than the whole answer's ~25 s
    assert reused["type"] == "error" and reused["error_code"] == "context_closed"
    assert "cartesia/tts/websocket outcome=cancelled" in app.log()


@pytest.mark.slow
def test_socket_errors_name_their_context_and_the_socket_serves_on(client: TestClient) -> None:
    with client.websocket_connect(socket_url()) as ws:
        ws.send_text("{not json")
        assert ws.receive_json()["error_code"] == "invalid_message"
        ws.send_json({"transcript": "no context"})
        assert ws.receive_json()["error_code"] == "invalid_message"
        ws.send_json({"context_id": "v", "transcript": "Hi."})
        unnamed = ws.receive_json()
        assert unnamed["request_id"]  # the socket's X-Request-Id
        assert unnamed | {"message": "", "request_id": ""} == {
            "type": "error",
            "done": True,
            "status_code": 422,
            "error_code": "invalid_message",
            "title": HTTPStatus(422).phrase,
            "message": "",
            "request_id": "",
            "error": "a context's first message names its voice and output_format",
            "context_id": "v",
        }
        ws.send_json(message("u", "Hi.", voice={"mode": "id", "id": "nobody"}))
        assert ws.receive_json()["error_code"] == "voice_not_found"
        ws.send_json(message("w", "Hi.", output_format=raw(container="wav")))
        assert ws.receive_json()["error_code"] == "invalid_output_format"
        ws.send_json(message("m", "Hi.", model_id="gpt-4"))
        assert ws.receive_json()["error_code"] == "model_not_found"
        ws.send_json(message("e", "", **{"continue": False}))
        assert ws.receive_json()["type"] == "done"
        for index in range(6):
            ws.send_json(message(f"c{index}", "Wait", **{"continue": True}))
        refused = ws.receive_json()
        assert (refused["error_code"], refused["context_id"]) == ("too_many_contexts", "c5")
        ws.send_json({"context_id": "c0", "cancel": True})
        ws.send_json(message("ok", "Still here."))
        for index in range(1, 5):
            ws.send_json(message(f"c{index}", "", **{"continue": False}))
        events = until_done(ws, 5)
    dones = [e["context_id"] for e in events if e["type"] == "done"]
    assert sorted(dones) == ["c1", "c2", "c3", "c4", "ok"]


def test_socket_key_is_checked_at_the_handshake(client: TestClient) -> None:
    with pytest.raises(WebSocketDisconnect), client.websocket_connect(socket_url("wrong")):
        pass
    with client.websocket_connect(f"{BASE}/websocket", headers=KEY) as ws:
        ws.send_json(message("k", "Hi."))
        assert until_done(ws)[-1]["type"] == "done"


def test_voices_page_by_page_in_cartesia_shape(client: TestClient) -> None:
    first = client.get("/cartesia/voices", params={"limit": 20}, headers=KEY).json()
    assert len(first["data"]) == 20 and first["has_more"]
    heart = next(voice for voice in first["data"] if voice["id"] == "af_heart")
    assert heart | {"created_at": "", "description": ""} == {
        "id": "af_heart",
        "name": "af_heart",
        "description": "",
        "tagline": "",
        "access": "public",
        "visibility": "all",
        "is_owner": False,
        "created_at": "",
        "language": "en",
        "locales": [{"locale": "en-US", "is_native": True}],
        "gender": "feminine",
    }
    after = client.get("/cartesia/voices", params={"starting_after": first["data"][-1]["id"]}, headers=KEY).json()
    assert after["data"] and after["data"][0]["id"] not in {voice["id"] for voice in first["data"]}
    japanese = client.get("/cartesia/voices", params={"q": "jf_", "gender": "feminine"}, headers=KEY).json()
    assert [voice["language"] for voice in japanese["data"]] == ["ja"] * 4 and not japanese["has_more"]
    assert client.get("/cartesia/voices/bf_emma", headers=KEY).json()["locales"][0]["locale"] == "en-GB"
    missing = client.get("/cartesia/voices/nobody", headers=KEY)
    assert missing.status_code == 404 and error(missing)["error_code"] == "voice_not_found"
    assert client.get("/cartesia/voices", params={"limit": 0}, headers=KEY).status_code == 422


@pytest.mark.slow
def test_cartesia_tags_break_spell_and_speed_are_read(client: TestClient) -> None:
    """`<break>` is that much silence (over HTTP, and over the WebSocket with the tag split across transcripts),
    `<spell>` spells its letters out, `<speed ratio>` speeds what follows it."""

    def spoken(transcript: str) -> np.ndarray:
        response = client.post(f"{BASE}/bytes", json=body(transcript=transcript), headers=KEY)
        assert response.status_code == 200, response.text
        return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32768

    quiet = asr.silences(spoken('One. <break time="1s"/> Two.'), 24_000, 0.5)
    assert len(quiet) == 1 and abs((quiet[0][1] - quiet[0][0]) - 1.0) < 0.1, quiet
    plain, spelled = spoken("Say NASA."), spoken("Say <spell>NASA</spell>.")
    assert spelled.size > 1.3 * plain.size
    sentence = spoken(SENTENCE)
    assert spoken(f'<speed ratio="1.5"/>{SENTENCE}').size < 0.85 * sentence.size
    with client.websocket_connect(socket_url()) as ws:
        for piece in ("One. <bre", 'ak time="1', 's"/> Two.'):
            ws.send_json({**message("c1", piece), "continue": True})
        ws.send_json({**message("c1", ""), "continue": False})
        events = until_done(ws)
    assert events[-1]["type"] == "done", events
    samples = np.frombuffer(audio_of(events, "c1"), dtype="<i2").astype(np.float32) / 32768
    quiet = asr.silences(samples, 16_000, 0.5)
    assert len(quiet) == 1 and abs((quiet[0][1] - quiet[0][0]) - 1.0) < 0.1, quiet


def awaiting_text(client: TestClient) -> int:
    return int(client.get("/health", headers=KEY).json()["inflight"]["awaiting_text"])


def test_contexts_with_an_empty_transcript_hold_live_places_across_sockets(
    client: TestClient, app: InProcessApp
) -> None:
    """A context opened with nothing to say yet is a live request waiting for text, as a native one is: the node's
    bound per client address (8 here) counts them across every socket, the next is Cartesia's `error` event, a
    cancelled one frees its place, one that ends with nothing said is `done`, and each leaves its outcome line."""
    ended = outcomes(app, "cartesia/tts/websocket")
    with client.websocket_connect(socket_url()) as first, client.websocket_connect(socket_url()) as second:
        for index in range(5):
            first.send_json(message(f"a{index}", "", **{"continue": True}))
        for index in range(3):
            second.send_json(message(f"b{index}", "", **{"continue": True}))
        wait_until(lambda: awaiting_text(client) == 8, 30, "eight contexts waiting for text")
        second.send_json(message("b3", "", **{"continue": True}))
        refused = second.receive_json()
        assert (refused["type"], refused["error_code"], refused["context_id"]) == ("error", "live_sessions_full", "b3")
        assert refused["status_code"] == 429
        second.send_json(message("ends", "", **{"continue": False}))  # ending with nothing said: refused as well
        assert second.receive_json()["error_code"] == "live_sessions_full"
        first.send_json({"context_id": "a0", "cancel": True})
        wait_until(lambda: awaiting_text(client) == 7, 30, "the cancelled context's place to be free")
        second.send_json(message("ends-too", "", **{"continue": False}))
        assert second.receive_json() == {"type": "done", "context_id": "ends-too", "done": True, "status_code": 200}
        for ws, names in ((first, ["a1", "a2", "a3", "a4"]), (second, ["b0", "b1", "b2"])):
            for name in names:  # ended with nothing said: each is `done`
                ws.send_json(message(name, "", **{"continue": False}))
            assert sorted(event["context_id"] for event in until_done(ws, len(names))) == names
    wait_until(lambda: awaiting_text(client) == 0, 30, "every context to end")
    lines = [line for line in app.log().splitlines() if "cartesia/tts/websocket outcome=" in line][ended:]
    assert sum("outcome=cancelled" in line for line in lines) == 1  # a0
    assert sum("outcome=live_sessions_full" in line for line in lines) == 2
    assert sum("outcome=ok " in line and " chars=0 " in line for line in lines) == 8


def test_word_by_word_flushes_keep_their_timestamps_and_flush_dones(client: TestClient) -> None:
    """A producer flushing after every word: the words queued while a step runs are spoken in one step (text.live_text
    `take`), yet every word has its timestamps, in order, and every flush its `flush_done`, after its audio."""
    words = "Every word here is flushed on its own".split()
    with client.websocket_connect(socket_url()) as ws:
        for word in words:
            ws.send_json(message("w", word + " ", flush=True, add_timestamps=True, **{"continue": True}))
        ws.send_json(message("w", "", **{"continue": False}))
        events = until_done(ws)
    stamps = [e["word_timestamps"] for e in events if e["type"] == "timestamps"]
    assert [word for stamp in stamps for word in stamp["words"]] == words
    starts = [start for stamp in stamps for start in stamp["start"]]
    assert starts == sorted(starts) and len(audio_of(events, "w")) / 2 / 16000 >= starts[-1]
    answered = [e["flush_id"] for e in events if e["type"] == "flush_done"]
    assert answered == list(range(1, len(words) + 1))
    last_chunk = max(i for i, e in enumerate(events) if e["type"] == "chunk")
    first_done = min(i for i, e in enumerate(events) if e["type"] == "flush_done")
    assert first_done > min(i for i, e in enumerate(events) if e["type"] == "chunk") and last_chunk < len(events) - 1
