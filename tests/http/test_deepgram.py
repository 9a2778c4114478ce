"""The Deepgram front in process: every encoding at its rates and containers, the `dg-` headers, Aura model names as
voices, the key as `Authorization: Token` (and the `token` query), Deepgram's error shape, and the WebSocket:
`Metadata` first, binary audio, `Flush` answered by `Flushed` once its audio is out, `Clear` by `Cleared` with
nothing of the cleared work after it, `Close`, and `Warning` for what the node ignores."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse, WebSocketTestSession

from tests.support.apps import InProcessApp

KEY = {"Authorization": "Token sk-dg"}
SPEAK = "/deepgram/v1/speak"
SENTENCE = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    with InProcessApp(tmp_path_factory.mktemp("deepgram"), POLYTTS_API_KEYS='{"sk-dg": "deepgram"}') as running:
        yield running


@pytest.fixture
def client(app: InProcessApp) -> TestClient:
    return app.client


@pytest.fixture(scope="module")
def seconds(app: InProcessApp) -> float:
    """How long the sentence is on the native route, in the voice aura-2-thalia-en speaks with."""
    native = app.client.post("/tts/stream", json={"text": SENTENCE, "voice": "af_heart"}, headers=KEY)
    return len(native.content) / 2 / 24_000


def speak(client: TestClient, text: str = SENTENCE, headers: dict[str, str] = KEY, **query: Any) -> Any:
    return client.post(SPEAK, params={"model": "aura-2-thalia-en", **query}, json={"text": text}, headers=headers)


def loud(samples: np.ndarray) -> bool:
    scale = 1.0 if samples.dtype.kind == "f" else 32768
    return float(np.sqrt(np.mean(np.asarray(samples, dtype=np.float64) ** 2))) > 0.01 * scale


def test_linear16_raw_and_wav_at_each_rate(client: TestClient, seconds: float) -> None:
    for rate in (8000, 16000, 24000, 48000):
        raw = speak(client, encoding="linear16", sample_rate=rate, container="none")
        assert raw.status_code == 200, raw.text
        assert (raw.headers["x-sample-rate"], raw.headers["content-type"]) == (str(rate), "application/octet-stream")
        samples = np.frombuffer(raw.content, dtype="<i2")
        assert samples.size / rate == pytest.approx(seconds, abs=0.02) and loud(samples)
    wav = speak(client, encoding="linear16", sample_rate=16000.0)  # the SDK types rates as floats; wav by default
    assert wav.headers["content-type"] == "audio/wav"
    info = soundfile.info(io.BytesIO(wav.content))
    assert (info.samplerate, info.subtype) == (16000, "PCM_16")


def test_telephony_encodings_at_8000(client: TestClient, seconds: float) -> None:
    for encoding, subtype, media in [("mulaw", "ULAW", "audio/basic"), ("alaw", "ALAW", "audio/x-alaw-basic")]:
        raw = speak(client, encoding=encoding, container="none")
        assert raw.status_code == 200 and raw.headers["content-type"] == media
        assert len(raw.content) / 8000 == pytest.approx(seconds, abs=0.02)  # one byte a sample, 8 kHz by default
        wav = speak(client, encoding=encoding, sample_rate=8000)
        info = soundfile.info(io.BytesIO(wav.content))
        assert (info.samplerate, info.subtype) == (8000, subtype)
        samples, _ = soundfile.read(io.BytesIO(wav.content), dtype="float32")
        assert samples.size / 8000 == pytest.approx(seconds, abs=0.03) and loud(samples)


def test_codecs_at_their_rates(client: TestClient, seconds: float) -> None:
    cases: list[tuple[dict[str, Any], str, int, int | None]] = [
        ({}, "audio/mpeg", 22050, 48000),  # mp3 is the REST default
        ({"encoding": "mp3", "bit_rate": 32000}, "audio/mpeg", 22050, 32000),
        ({"encoding": "opus", "container": "ogg"}, "audio/ogg", 48000, None),
        ({"encoding": "flac", "sample_rate": 16000}, "audio/flac", 16000, None),
        ({"encoding": "aac"}, "audio/aac", 22050, None),
    ]
    for query, media, rate, bit_rate in cases:
        response = speak(client, **query)
        assert response.status_code == 200 and response.headers["content-type"] == media, query
        with av.open(io.BytesIO(response.content), mode="r") as container:
            stream = container.streams.audio[0]
            assert stream.sample_rate == rate, query
            if bit_rate is not None:
                assert stream.bit_rate == bit_rate
            decoded = sum(frame.samples for frame in container.decode(audio=0))
        assert decoded / rate == pytest.approx(seconds, abs=0.15), query


def test_dg_headers_and_the_request_id(client: TestClient, app: InProcessApp) -> None:
    response = speak(client, encoding="linear16", container="none", tag="demo", mip_opt_out="true")
    assert response.headers["dg-request-id"] == response.headers["x-request-id"]
    assert response.headers["dg-model-name"] == "aura-2-thalia-en"
    assert response.headers["dg-char-count"] == str(len(SENTENCE))
    assert response.headers["x-ignored-parameters"] == "mip_opt_out, tag"
    assert f"id={response.headers['dg-request-id']}" in app.log()


def test_models_name_stock_voices_and_voices_of_the_node(client: TestClient) -> None:
    thalia = speak(client, encoding="linear16", container="none").content
    assert speak(client, encoding="linear16", container="none", model="af_heart").content == thalia
    assert speak(client, encoding="linear16", container="none", model="aura-asteria-en").content == thalia
    blend = speak(client, encoding="linear16", container="none", model="af_heart(1)+am_adam(1)")
    assert blend.status_code == 200 and blend.content != thalia
    spanish = speak(client, "Hola, ¿cómo estás?", encoding="linear16", container="none", model="aura-2-celeste-es")
    assert spanish.status_code == 200 and loud(np.frombuffer(spanish.content, dtype="<i2"))


def error(response: Any) -> dict[str, Any]:
    found = response.json()
    assert set(found) == {"err_code", "err_msg", "request_id"}, found
    assert found["request_id"] == response.headers["x-request-id"]
    return found


def test_bad_input_answers_in_deepgram_shape(client: TestClient) -> None:
    cases: list[tuple[dict[str, Any], str, int, str]] = [
        ({"model": "aura-2-nobody-en"}, SENTENCE, 404, "model_not_found"),
        ({"model": "aura-2-julius-de"}, SENTENCE, 404, "model_not_found"),
        ({"model": "nobody"}, SENTENCE, 404, "voice_not_found"),
        ({"encoding": "vorbis"}, SENTENCE, 422, "invalid_input"),
        ({"encoding": "linear16", "sample_rate": 12345}, SENTENCE, 422, "invalid_output_format"),
        ({"encoding": "mulaw", "sample_rate": 24000}, SENTENCE, 422, "invalid_output_format"),
        ({"encoding": "mp3", "sample_rate": 48000}, SENTENCE, 422, "invalid_output_format"),
        ({"encoding": "mp3", "container": "wav"}, SENTENCE, 422, "invalid_output_format"),
        ({"encoding": "linear16", "sample_rate": 8000.5}, SENTENCE, 422, "invalid_output_format"),
        ({"encoding": "flac", "bit_rate": 64000}, SENTENCE, 422, "invalid_output_format"),
        ({"encoding": "opus", "bit_rate": 1000}, SENTENCE, 422, "invalid_output_format"),
        ({"speed": 3}, SENTENCE, 422, "invalid_input"),
        ({}, "", 422, "empty_text"),
        ({}, "word " * 20000, 413, "text_too_long"),
    ]
    for query, text, status, code in cases:
        response = speak(client, text, **query)
        assert (response.status_code, error(response)["err_code"]) == (status, code), query
    malformed = client.post(SPEAK, content=b"{not json", headers={**KEY, "content-type": "application/json"})
    assert malformed.status_code == 422 and error(malformed)["err_code"] == "invalid_input"
    for wrong in ({"Authorization": "Token nope"}, {"Authorization": "Basic sk-dg"}, {}):
        refused = speak(client, headers=wrong)
        assert refused.status_code == 401 and "Token <key>" in error(refused)["err_msg"]
    assert speak(client, headers={"Authorization": "Bearer sk-dg"}, encoding="linear16").status_code == 200
    assert speak(client, headers={"Authorization": "bearer sk-dg"}, encoding="linear16").status_code == 200
    assert speak(client, encoding="linear16").status_code == 200  # and the node serves on
    assert client.get(SPEAK, headers=KEY).status_code == 405  # the WebSocket's GET needs its handshake


# --- the WebSocket ------------------------------------------------------------------------------------------------


def socket_url(key: str | None = None, **query: Any) -> str:
    given = {"model": "aura-2-thalia-en", "encoding": "linear16", "sample_rate": 16000, **query}
    if key is not None:
        given["token"] = key
    return f"{SPEAK}?" + "&".join(f"{name}={value}" for name, value in given.items())


def until(ws: WebSocketTestSession, kind: str) -> tuple[bytes, list[dict[str, Any]]]:
    """The audio and the messages up to the first message of `kind` (included)."""
    audio, messages = b"", []
    while True:
        received = ws.receive()
        if received.get("bytes") is not None:
            audio += received["bytes"]
            continue
        messages.append(json.loads(received["text"]))
        if messages[-1]["type"] == kind:
            return audio, messages


def test_metadata_then_audio_then_flushed(client: TestClient, seconds: float) -> None:
    with client.websocket_connect(socket_url(), headers=KEY) as ws:
        first = ws.receive_json()
        assert first["type"] == "Metadata" and first["model_name"] == "aura-2-thalia-en" and first["request_id"]
        for token in ("Hello ", "there, ", "how ", "are ", "you ", "today?"):
            ws.send_json({"type": "Speak", "text": token})
        ws.send_json({"type": "Flush"})
        audio, messages = until(ws, "Flushed")
        assert messages == [{"type": "Flushed", "sequence_id": 0}]
        # Cut into phrases as it came, the live text is a little longer than the sentence spoken whole.
        assert seconds * 0.9 < len(audio) / 2 / 16000 < seconds * 1.5 and loud(np.frombuffer(audio, "<i2"))
        ws.send_json({"type": "Flush"})  # nothing new: answered at once
        assert ws.receive_json() == {"type": "Flushed", "sequence_id": 1}
        ws.send_json({"type": "Speak", "text": "And a second turn."})
        ws.send_json({"type": "Flush"})
        second, messages = until(ws, "Flushed")
        assert messages == [{"type": "Flushed", "sequence_id": 2}] and len(second) / 2 / 16000 > 0.5
        ws.send_json({"type": "Close"})
        assert ws.receive() == {"type": "websocket.close", "code": 1000, "reason": ""}


def test_word_timestamps_where_asked(client: TestClient) -> None:
    with client.websocket_connect(socket_url(word_timestamps="true"), headers=KEY) as ws:
        assert ws.receive_json()["type"] == "Metadata"
        ws.send_json({"type": "Speak", "text": SENTENCE})
        ws.send_json({"type": "Flush"})
        audio, messages = until(ws, "Flushed")
    words = [word for message in messages if message["type"] == "Words" for word in message["words"]]
    assert " ".join(word["word"] for word in words) == SENTENCE
    assert 0 <= words[0]["start"] and words[-1]["end"] <= len(audio) / 2 / 16000 + 0.01


def test_telephony_on_the_socket(client: TestClient, seconds: float) -> None:
    for encoding in ("mulaw", "alaw"):
        with client.websocket_connect(socket_url(encoding=encoding, sample_rate=8000), headers=KEY) as ws:
            assert ws.receive_json()["type"] == "Metadata"
            ws.send_json({"type": "Speak", "text": SENTENCE})
            ws.send_json({"type": "Flush"})
            audio, _ = until(ws, "Flushed")
        assert seconds * 0.9 < len(audio) / 8000 < seconds * 1.5  # one byte a sample
        assert len(set(audio)) > 50  # speech, not the one byte of silence


@pytest.mark.slow
def test_clear_stops_the_work_and_the_socket_serves_on(client: TestClient, app: InProcessApp) -> None:
    long = "This is a long answer that the listener interrupts before it is over. " * 6
    with client.websocket_connect(socket_url(), headers=KEY) as ws:
        assert ws.receive_json()["type"] == "Metadata"
        ws.send_json({"type": "Speak", "text": long})
        ws.send_json({"type": "Flush"})
        received = ws.receive()
        assert received.get("bytes")  # the answer has started
        ws.send_json({"type": "Clear"})
        heard, messages = until(ws, "Cleared")
        assert messages == [{"type": "Cleared", "sequence_id": 0}]  # the cleared flush is never answered
        assert len(heard) / 2 / 16000 < 8  # far less than the whole answer's ~25 s
        ws.send_json({"type": "Speak", "text": "A fresh start."})
        ws.send_json({"type": "Flush"})
        fresh, messages = until(ws, "Flushed")
        assert messages == [{"type": "Flushed", "sequence_id": 1}] and len(fresh) / 2 / 16000 > 0.5
    assert "deepgram/v1/speak outcome=cancelled" in app.log()


def test_warnings_for_what_the_node_ignores(client: TestClient) -> None:
    with client.websocket_connect(socket_url(), headers=KEY) as ws:
        assert ws.receive_json()["type"] == "Metadata"
        ws.send_text("{not json")
        ws.send_json({"type": "Shout", "text": "Hi"})
        ws.send_json({"type": "Speak"})
        ws.send_json({"type": "Speak", "text": "x" * 70_000})
        codes = [ws.receive_json() for _ in range(4)]
        assert [message["type"] for message in codes] == ["Warning"] * 4
        assert [message["warn_code"] for message in codes] == [
            "invalid_message",
            "invalid_input",
            "empty_text",
            "invalid_input",
        ]
        assert all(message["warn_msg"] == message["description"] for message in codes)
        ws.send_json({"type": "Speak", "text": "Still here."})
        ws.send_json({"type": "Flush"})
        audio, _ = until(ws, "Flushed")
        assert audio


def test_the_handshake_refuses_in_deepgram_shape(client: TestClient) -> None:
    for url, headers in [
        (socket_url("wrong"), {}),
        (socket_url(), {"Authorization": "Token wrong"}),
        (socket_url(model="aura-2-nobody-en"), KEY),
        (socket_url(encoding="mp3"), KEY),
        (socket_url(sample_rate=22050), KEY),
    ]:
        with pytest.raises(WebSocketDenialResponse) as refused, client.websocket_connect(url, headers=headers):
            pass
        answer = refused.value
        # The reason where a WebSocket library shows it (its headers), as Deepgram sends it: dg-error and the id.
        assert json.loads(answer.headers["dg-error"]) == answer.json(), url
        assert answer.headers["dg-request-id"] == answer.json()["request_id"] != ""
    with client.websocket_connect(socket_url("sk-dg")) as ws:  # a browser's key in the `token` query
        assert ws.receive_json()["type"] == "Metadata"
