"""The speech routes in this process, on the embedded Kokoro ONNX default: what `/tts` and `/tts/stream` answer
(audio and its headers, cache hits, word timings and captions), every client error decided before the first byte,
and the operations routes a client sees beside them (health, readiness, unloading)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import av
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp
from tests.support.clips import assert_speech_like, decode_wav, wav_clip
from tests.support.servers import outcome_line, outcomes, spoken_chars
from tests.support.voices import clone_form

SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.mark.slow
def test_tts_returns_speech_whose_duration_fits_the_text(client: TestClient) -> None:
    response = client.post("/tts", json={"text": SENTENCE, "language": "en"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/wav"
    assert response.headers["x-engine"] == "kokoro" and response.headers["x-sample-rate"] == "24000"
    samples, rate = decode_wav(response.content)
    assert rate == 24_000
    seconds = len(samples) / rate
    assert 0.04 * len(SENTENCE) < seconds < 0.2 * len(SENTENCE), seconds
    assert_speech_like(samples, rate)


@pytest.mark.slow
def test_repeat_is_a_cache_hit(client: TestClient) -> None:
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


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"text": "hi", "voice_id": "0123456789abcdef"}, 404, "voice_not_found"),
        ({"text": "hi", "voice_id": "no_such_voice"}, 404, "voice_not_found"),
        ({"text": "hi", "speed": 5}, 422, "invalid_input"),
        ({"text": "hi", "speed": True}, 422, "invalid_input"),
        ({"text": "hi", "speed": "1.5"}, 422, "invalid_input"),
        ({"text": "hi", "max_sentences_per_gen": True}, 422, "invalid_input"),
        ({"text": "hi", "unknown_field": 1}, 422, "invalid_input"),
        ({"voice_id": "jf_alpha"}, 422, "invalid_input"),
        ({"text": "   "}, 422, "empty_text"),
        ({"text": "hi", "language": "klingon"}, 422, "unsupported_language"),
        ({"text": "x" * 5001}, 413, "text_too_long"),
    ],
)
@pytest.mark.parametrize("route", ["/tts", "/tts/stream"])
def test_client_errors_are_decided_before_the_first_byte(
    client: TestClient, route: str, body: dict, status: int, code: str
) -> None:
    response = client.post(route, json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["code"] == code


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
    client: TestClient, content: bytes, status: int, code: str, says: str
) -> None:
    response = client.post("/tts", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert response.json()["code"] == code and says in response.json()["message"]
    assert '"8"' not in response.text  # a JSON error position is not presented as a field


def test_the_openai_route_calls_a_lone_surrogate_invalid_text(client: TestClient) -> None:
    """The code every other route answers for it, where pydantic's length check called it `invalid_input`."""
    body = b'{"model": "tts-1", "voice": "alloy", "input": "lone \\ud800 surrogate"}'
    response = client.post("/v1/audio/speech", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_text" and "surrogate" in error["message"], error
    empty = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": ""})
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "invalid_input"


def test_a_huge_voice_name_is_not_echoed_back(client: TestClient) -> None:
    name = "v" * 1_000_000
    response = client.post("/tts", json={"text": "hi", "voice_id": name})
    assert response.status_code == 404 and response.json()["code"] == "voice_not_found"
    assert len(response.text) < 1000


def test_refused_requests_are_logged_and_counted(client: TestClient, app: InProcessApp) -> None:
    assert client.post("/tts", json={"text": "hi", "voice_id": "no_such_voice_here"}).status_code == 404
    assert client.post("/tts/stream", content=b"{", headers={"content-type": "application/json"}).status_code == 422
    metrics = client.get("/metrics").text
    assert 'polytts_requests_total{engine="none",outcome="voice_not_found",route="tts"} ' in metrics
    assert 'polytts_requests_total{engine="none",outcome="invalid_input",route="tts/stream"} ' in metrics
    log = app.log()
    assert "tts outcome=voice_not_found engine=-" in log and "tts/stream outcome=invalid_input" in log


@pytest.mark.slow
def test_an_openai_voice_object_is_looked_up_as_its_name_is(client: TestClient) -> None:
    body = {"model": "tts-1", "input": "Hi there.", "response_format": "pcm"}
    named = client.post("/v1/audio/speech", json={**body, "voice": "alloy"})
    custom = client.post("/v1/audio/speech", json={**body, "voice": {"id": "alloy"}})
    assert custom.status_code == 200, custom.text
    assert custom.headers["x-voice-id"] == named.headers["x-voice-id"] == "af_alloy"
    assert custom.content == named.content
    refused = client.post("/v1/audio/speech", json={**body, "voice": "alloy", "speed": True})
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "speed"


def test_live_options_take_numbers_as_query_text_but_never_true(client: TestClient) -> None:
    ndjson = {"content-type": "application/x-ndjson"}
    spoken = client.post("/tts/live?speed=1.5", content=b'{"text": "Hi there."}\n', headers=ndjson)
    assert spoken.status_code == 200 and len(spoken.content) > 4800, spoken.text
    refused = client.post("/tts/live", content=b'{"speed": true}\n{"text": "Hi there."}\n', headers=ndjson)
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_input", refused.text
    assert "speed" in refused.json()["message"]


def live_socket(client: TestClient, messages: list[str]) -> tuple[bytes, list[dict[str, Any]]]:
    """Send each raw message to the native live WebSocket, then read its audio and events until it closes."""
    audio, events = bytearray(), []
    with client.websocket_connect("/tts/live/ws?voice_id=af_heart&language=en") as ws:
        for raw in messages:
            ws.send_text(raw)
        while (received := ws.receive())["type"] != "websocket.close":
            if received.get("bytes"):
                audio += received["bytes"]
            elif received.get("text"):
                events.append(json.loads(received["text"]))
    return bytes(audio), events


def test_live_text_is_cleaned_as_every_routes_text(client: TestClient) -> None:
    """A live message with a lone surrogate is refused with the code the whole-text routes answer; format characters
    (zero-width spaces and joiners, a byte order mark) are dropped before the words are spoken and timed."""
    _, refused = live_socket(client, ['{"text": "Hello \\ud800 there."}'])
    assert [event["type"] for event in refused] == ["start", "error"], refused
    assert refused[1]["code"] == "invalid_text" and "surrogate" in refused[1]["message"]

    audio, events = live_socket(client, ['{"text": "Zero\u200bwidth wo\u2060rds\ufeff."}', '{"end": true}'])
    assert [event["type"] for event in events][-1] == "done" and len(audio) > 4800, events
    words = [word["word"] for event in events if event["type"] == "words" for word in event["words"]]
    assert words == ["Zerowidth", "words."], words


def test_voice_of_an_engine_this_node_lacks_is_a_422(client: TestClient) -> None:
    voice_id = client.post("/voices", **clone_form(wav_clip(1.1, 600))).json()["voice_id"]
    for route in ("/tts", "/tts/stream"):
        response = client.post(route, json={"text": "hello", "voice_id": voice_id})
        assert response.status_code == 422 and response.json()["code"] == "engine_unavailable"
        assert "qwen" in response.json()["message"]


@pytest.mark.slow
def test_health_ready_and_unload(client: TestClient) -> None:
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


# --- word timings ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tts_with_timestamps_returns_audio_and_every_word(client: TestClient) -> None:
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
@pytest.mark.slow
def test_tts_captions(client: TestClient, fmt: str, media: str, first_line: str) -> None:
    answer = client.post("/tts", json={"text": "Captions follow the words. They come in cues.", "format": fmt})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith(media)
    assert answer.text.splitlines()[0] == first_line and "-->" in answer.text and "Captions" in answer.text


def test_timestamps_where_no_engine_can_time_words(client: TestClient) -> None:
    refused = client.post("/tts/stream", json={"text": "hi", "timestamps": True})
    assert refused.status_code == 422 and refused.json()["code"] == "timestamps_unsupported"
    voice = client.post(
        "/voices",
        files={"audio": ("r.wav", wav_clip(1.3, 410), "audio/wav")},
        data={"engine": "voxcpm", "ref_text": "a reference"},
    ).json()["voice_id"]
    answer = client.post("/tts", json={"text": "hi", "voice_id": voice, "timestamps": True})
    assert answer.status_code == 422 and answer.json()["code"] == "timestamps_unsupported"


@pytest.mark.slow
def test_a_live_socket_closed_after_its_end_stops_the_work(client: TestClient, app: InProcessApp) -> None:
    """The text is over (`end`), and the client goes away after its first audio: nobody hears the rest."""
    text = "This is a long answer that the listener walks away from before it is over. " * 8
    before = outcomes(app, "tts/live/ws")
    with client.websocket_connect("/tts/live/ws?voice_id=af_heart&language=en") as ws:
        ws.send_json({"text": text})
        ws.send_json({"end": True})
        assert ws.receive_json()["type"] == "start"
        assert ws.receive_bytes()
        ws.close()
        line = outcome_line(app, "tts/live/ws", before)
    assert " outcome=cancelled " in line and 0 < spoken_chars(line) < len(text) / 2, line


def pyav_seconds(data: bytes) -> float:
    """Seconds of audio FFmpeg decodes from a file or stream, to its end."""
    with av.open(io.BytesIO(data), mode="r") as container:
        return sum((frame.samples / frame.sample_rate for frame in container.decode(audio=0)), 0.0)


SOUNDFILE_READS = ("wav", "flac", "mp3", "opus")
"""The formats libsndfile (python-soundfile) decodes: all but ADTS AAC, which only FFmpeg (PyAV) reads."""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["wav", "mp3", "opus", "aac", "flac"])
def test_every_format_from_tts_reads_back_whole_in_soundfile_and_pyav(client: TestClient, fmt: str) -> None:
    """A file of known length says it: soundfile reads the whole of it (a FLAC's STREAMINFO carries its samples)."""
    pcm = client.post("/tts", json={"text": SENTENCE, "format": "pcm"}).content
    seconds = len(pcm) / 2 / 24_000
    data = client.post("/tts", json={"text": SENTENCE, "format": fmt}).content
    decoded = pyav_seconds(data)
    assert decoded == pytest.approx(seconds, abs=0.1), fmt
    if fmt in SOUNDFILE_READS:
        samples, rate = sf.read(io.BytesIO(data), dtype="int16")
        assert samples.size / rate == pytest.approx(seconds, abs=0.1), fmt
        if fmt in ("wav", "flac"):  # lossless, and of exactly the length it says
            assert sf.info(io.BytesIO(data)).frames == samples.size == len(pcm) // 2


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_every_streamed_format_reads_back_in_pyav(client: TestClient, fmt: str) -> None:
    """A stream's length is not known when its header leaves (a streamed FLAC says 0, unknown, as FLAC allows):
    FFmpeg reads it to its end all the same."""
    pcm = client.post("/tts", json={"text": SENTENCE, "format": "pcm"}).content
    data = client.post("/tts/stream", json={"text": SENTENCE, "format": fmt}).content
    decoded = pyav_seconds(data)
    assert decoded == pytest.approx(len(pcm) / 2 / 24_000, abs=0.1), fmt
