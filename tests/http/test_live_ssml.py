"""SSML on the live routes, its tags split across the native live WebSocket's messages, and a `<break>` before any
text or after the last phrase: silences measured in the audio."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from bench import asr
from tests.http.test_speech import live_socket
from tests.support.clips import decode_wav

RATE = 24_000


def samples_of(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768


def leading_silence(samples: np.ndarray, rate: int) -> float:
    return int(np.flatnonzero(np.abs(samples) > 0.01)[0]) / rate


@pytest.mark.slow
def test_a_break_split_across_messages_is_that_much_silence(client: TestClient) -> None:
    pieces = [
        "<spe",
        'ak>Hello <sub alias="there">the',
        "re</sub>.<brea",
        'k time="15',
        '00ms"/>General Kenobi.</speak>',
    ]
    audio, events = live_socket(client, [json.dumps({"text": piece}) for piece in pieces] + ['{"end": true}'])
    assert events[-1]["type"] == "done", events
    quiet = asr.silences(samples_of(audio), RATE, 0.5)
    assert len(quiet) == 1 and abs((quiet[0][1] - quiet[0][0]) - 1.5) < 0.1, quiet
    words = [word["word"] for event in events if event["type"] == "words" for word in event["words"]]
    assert words == ["Hello", "there.", "General", "Kenobi."], words


@pytest.mark.slow
def test_a_break_before_any_text_is_that_much_leading_silence(client: TestClient) -> None:
    text = '<speak><break time="1200ms"/>Hello there.</speak>'
    response = client.post("/tts", json={"text": text, "voice": "af_heart"})
    assert response.status_code == 200, response.text
    samples, rate = decode_wav(response.content)
    assert abs(leading_silence(samples, rate) - 1.2) < 0.06
    audio, events = live_socket(client, [json.dumps({"text": text}), '{"end": true}'])
    assert events[-1]["type"] == "done" and abs(leading_silence(samples_of(audio), RATE) - 1.2) < 0.06


def trailing_silence(samples: np.ndarray, rate: int) -> float:
    return (len(samples) - 1 - int(np.flatnonzero(np.abs(samples) > 0.01)[-1])) / rate


@pytest.mark.slow
def test_a_break_after_the_last_phrase_has_started_is_that_much_trailing_silence(client: TestClient) -> None:
    """The break arrives once the phrase's audio has begun, so no phrase is left to carry it: it ends the audio as
    exactly that much silence, as it does a whole document."""
    response = client.post("/tts", json={"text": '<speak>Hello there.<break time="1200ms"/></speak>'})
    assert response.status_code == 200, response.text
    samples, rate = decode_wav(response.content)
    assert abs(trailing_silence(samples, rate) - 1.2) < 0.06
    audio, events = bytearray(), []
    with client.websocket_connect("/tts/live/ws?voice_id=af_heart&language=en") as ws:
        ws.send_text(json.dumps({"text": "<speak>Hello there.", "flush": True}))
        while not (received := ws.receive()).get("bytes"):
            events.append(json.loads(received["text"]))
        audio += received["bytes"]
        ws.send_text(json.dumps({"text": '<break time="1200ms"/></speak>'}))
        ws.send_text('{"end": true}')
        while (received := ws.receive())["type"] != "websocket.close":
            if received.get("bytes"):
                audio += received["bytes"]
            elif received.get("text"):
                events.append(json.loads(received["text"]))
    assert events[-1]["type"] == "done", events
    assert abs(trailing_silence(samples_of(bytes(audio)), RATE) - 1.2) < 0.06
    assert abs(events[-1]["audio_seconds"] - len(audio) / 2 / RATE) < 0.01


def test_live_ssml_that_cannot_be_read_ends_with_an_error_naming_it(client: TestClient) -> None:
    _, events = live_socket(client, ['{"text": "<speak>Hi <aud"}', '{"text": "io/> there."}', '{"end": true}'])
    assert events[-1]["type"] == "error" and events[-1]["code"] == "invalid_ssml", events
    assert "<audio>" in events[-1]["message"]


@pytest.mark.slow
def test_a_voice_split_across_messages_says_what_follows_in_that_voice(client: TestClient) -> None:
    """Kokoro is deterministic: the live audio ends with exactly what a plain request in the named voice answers."""
    pieces = ["<speak>Hello there. <voi", 'ce name="am_adam">General Kenobi.</voice></speak>']
    audio, events = live_socket(client, [json.dumps({"text": piece}) for piece in pieces] + ['{"end": true}'])
    assert events[-1]["type"] == "done", events
    words = [word["word"] for event in events if event["type"] == "words" for word in event["words"]]
    assert words == ["Hello", "there.", "General", "Kenobi."], words

    def plain(text: str, voice: str) -> bytes:
        response = client.post("/tts/stream", json={"text": text, "voice": voice})
        assert response.status_code == 200, response.text
        return response.content

    named, own = plain("General Kenobi.", "am_adam"), plain("General Kenobi.", "af_heart")
    assert audio.endswith(named) and not audio.endswith(own)
    hello = plain("Hello there.", "af_heart")
    assert audio.startswith(hello[: len(hello) // 2])  # the request's voice until the tag


def test_a_live_voice_that_is_no_stock_voice_ends_with_an_error_naming_it(client: TestClient) -> None:
    messages = ['{"text": "<speak>Hi. <voice name=\\"nobo"}', '{"text": "dy_here\\">Bye.</voice>"}', '{"end": true}']
    _, events = live_socket(client, messages)
    assert events[-1]["type"] == "error" and events[-1]["code"] == "invalid_ssml", events
    assert "nobody_here" in events[-1]["message"]
