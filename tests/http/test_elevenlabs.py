"""The ElevenLabs front in process: output formats at their rates, alignments from word timings, voices, the key as
`xi-api-key`, ElevenLabs' error shape for bad input, and the WebSockets' contexts."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from tests.support.apps import InProcessApp
from tests.support.polling import wait_until
from tests.support.servers import outcome_line, outcomes, spoken_chars
from web.fronts.elevenlabs.protocol import GenerationConfig

KEY = {"xi-api-key": "sk-el"}
BASE = "/elevenlabs/v1"
SAY = f"{BASE}/text-to-speech/af_heart"
SENTENCE = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    with InProcessApp(tmp_path_factory.mktemp("elevenlabs"), POLYTTS_API_KEYS='{"sk-el": "eleven"}') as running:
        yield running


@pytest.fixture
def client(app: InProcessApp) -> TestClient:
    return app.client


def pcm_seconds(client: TestClient) -> float:
    native = client.post("/tts/stream", json={"text": SENTENCE, "voice": "af_heart"}, headers=KEY)
    return len(native.content) / 2 / 24_000


def loud(samples: np.ndarray) -> bool:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) > 300


def detail(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"detail"}, body
    return body["detail"]


@pytest.mark.parametrize("rate", [16000, 22050, 24000, 44100])
def test_pcm_comes_at_the_rate_asked(client: TestClient, rate: int) -> None:
    response = client.post(f"{SAY}?output_format=pcm_{rate}", json={"text": SENTENCE}, headers=KEY)
    assert response.status_code == 200, response.text
    assert response.headers["x-sample-rate"] == str(rate)
    samples = np.frombuffer(response.content, dtype="<i2")
    assert samples.size / rate == pytest.approx(pcm_seconds(client), abs=0.02)
    assert loud(samples)


@pytest.mark.parametrize(("name", "media_type"), [("ulaw_8000", "audio/basic"), ("alaw_8000", "audio/x-alaw-basic")])
def test_g711_is_one_byte_per_sample_at_8000(client: TestClient, name: str, media_type: str) -> None:
    response = client.post(f"{SAY}/stream?output_format={name}", json={"text": SENTENCE}, headers=KEY)
    assert response.status_code == 200 and response.headers["content-type"] == media_type
    assert len(response.content) / 8000 == pytest.approx(pcm_seconds(client), abs=0.02)
    assert len(set(response.content)) > 50  # speech, not the one byte of silence


@pytest.mark.parametrize(("name", "rate", "bit_rate"), [("mp3_44100_128", 44100, 128_000), ("opus_48000_64", 48000, 0)])
def test_codecs_at_their_rate_and_bit_rate(client: TestClient, name: str, rate: int, bit_rate: int) -> None:
    response = client.post(f"{SAY}?output_format={name}", json={"text": SENTENCE}, headers=KEY)
    assert response.status_code == 200, response.text
    with av.open(io.BytesIO(response.content), mode="r") as container:
        stream = container.streams.audio[0]
        assert stream.rate == rate
        if bit_rate:
            assert stream.bit_rate == bit_rate
        samples = sum(frame.samples for frame in container.decode(audio=0))
    assert samples / rate == pytest.approx(pcm_seconds(client), abs=0.1)


def test_the_default_format_is_mp3_44100(client: TestClient) -> None:
    response = client.post(SAY, json={"text": SENTENCE}, headers=KEY)
    assert response.headers["content-type"] == "audio/mpeg" and response.headers["x-sample-rate"] == "44100"


def test_ignored_fields_are_named(client: TestClient) -> None:
    body = {
        "text": SENTENCE,
        "model_id": "eleven_flash_v2_5",
        "previous_text": "Hi.",
        "voice_settings": {"stability": 1},
    }
    response = client.post(f"{SAY}?output_format=pcm_24000", json={**body, "seed": 3}, headers=KEY)
    assert response.status_code == 200
    assert response.headers["x-ignored-parameters"] == "previous_text, seed, voice_settings.stability"


def check_alignment(found: dict[str, Any], seconds: float) -> None:
    starts, ends = found["character_start_times_seconds"], found["character_end_times_seconds"]
    assert len(found["characters"]) == len(starts) == len(ends)
    assert starts == sorted(starts) and all(begin <= end for begin, end in zip(starts, ends, strict=True))
    assert 0 <= starts[0] and ends[-1] <= seconds + 0.01


@pytest.mark.slow
def test_with_timestamps_aligns_every_character(client: TestClient) -> None:
    response = client.post(f"{SAY}/with-timestamps?output_format=pcm_16000", json={"text": SENTENCE}, headers=KEY)
    assert response.status_code == 200, response.text
    body = response.json()
    seconds = len(base64.b64decode(body["audio_base64"])) / 2 / 16000
    assert "".join(body["alignment"]["characters"]) == SENTENCE
    check_alignment(body["alignment"], seconds)
    assert body["normalized_alignment"] == body["alignment"]
    assert body["alignment"]["character_end_times_seconds"][-1] > seconds - 0.5  # the last word ends near the end


@pytest.mark.slow
def test_with_timestamps_repeated_comes_from_the_cache(client: TestClient, app: InProcessApp) -> None:
    """Pipecat's ElevenLabs HTTP service always asks for timestamps: its repeats are hits, timings and all."""
    text = "A repeated answer with its timings."
    url = f"{SAY}/stream/with-timestamps?output_format=pcm_16000"
    first = client.post(url, json={"text": text}, headers=KEY)
    before = outcomes(app, "/stream/with-timestamps")
    again = client.post(url, json={"text": text}, headers=KEY)
    assert again.status_code == 200 and again.content == first.content
    assert " cache=hit " in outcome_line(app, "/stream/with-timestamps", before)


@pytest.mark.slow
def test_stream_with_timestamps_sends_each_chunk_with_its_characters(client: TestClient) -> None:
    text = f"{SENTENCE} I am fine, thank you. This is a longer second sentence that makes its own chunk of audio."
    response = client.post(f"{SAY}/stream/with-timestamps?output_format=pcm_24000", json={"text": text}, headers=KEY)
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    audio = b"".join(base64.b64decode(line["audio_base64"]) for line in lines)
    timed = [line["alignment"] for line in lines if line["alignment"]]
    assert len(timed) >= 2
    merged = {key: [value for found in timed for value in found[key]] for key in timed[0]}
    assert "".join(merged["characters"]) == text
    check_alignment(merged, len(audio) / 2 / 24000)


@pytest.mark.slow
def test_bad_input_answers_in_elevenlabs_shape(client: TestClient) -> None:
    cases = [
        (f"{BASE}/text-to-speech/nobody", {"text": "Hi."}, 404, "voice_not_found"),
        (f"{SAY}?output_format=wav_1", {"text": "Hi."}, 422, "invalid_output_format"),
        (SAY, {"text": "Hi.", "model_id": "gpt-4"}, 404, "model_not_found"),
        (SAY, {"text": "x" * 200_000}, 413, "text_too_long"),
        (SAY, {"nothing": 1}, 422, "invalid_input"),
    ]
    for path, body, status, code in cases:
        response = client.post(path, json=body, headers=KEY)
        assert (response.status_code, detail(response)["status"]) == (status, code), response.text
    response = client.post(SAY, content=b"{not json", headers={**KEY, "content-type": "application/json"})
    assert response.status_code == 422 and detail(response)["status"] == "invalid_input"
    response = client.post(SAY, json={"text": "Hi."}, headers={"xi-api-key": "wrong"})
    assert response.status_code == 401 and detail(response)["status"] == "unauthorized"
    assert (
        client.post(f"{SAY}?output_format=pcm_16000", json={"text": "Still serving."}, headers=KEY).status_code == 200
    )


def test_refusals_are_counted_under_the_route_template(client: TestClient, app: InProcessApp) -> None:
    client.post(f"{BASE}/text-to-speech/someone", json={"nothing": 1}, headers=KEY)
    assert "elevenlabs/v1/text-to-speech/{voice_id} outcome=invalid_input" in app.log()
    assert "text-to-speech/someone" not in client.get("/metrics").text


def test_voices_in_elevenlabs_shape(client: TestClient) -> None:
    voices = client.get(f"{BASE}/voices", headers=KEY).json()["voices"]
    heart = next(voice for voice in voices if voice["voice_id"] == "af_heart")
    assert heart["category"] == "premade" and heart["labels"]["engine"] == "kokoro"
    assert client.get(f"{BASE}/voices/af_heart", headers=KEY).json() == heart
    missing = client.get(f"{BASE}/voices/nobody", headers=KEY)
    assert missing.status_code == 404 and detail(missing)["status"] == "voice_not_found"


def test_v2_voices_page_by_page(client: TestClient) -> None:
    first = client.get("/elevenlabs/v2/voices", params={"page_size": 20}, headers=KEY).json()
    assert len(first["voices"]) == 20 and first["has_more"] and first["total_count"] > 50
    after = client.get(
        "/elevenlabs/v2/voices", params={"page_size": 20, "next_page_token": first["next_page_token"]}, headers=KEY
    ).json()
    assert not {v["voice_id"] for v in first["voices"]} & {v["voice_id"] for v in after["voices"]}
    found = client.get(
        "/elevenlabs/v2/voices", params=[("voice_ids", "af_heart"), ("voice_ids", "bf_emma")], headers=KEY
    )
    assert [voice["voice_id"] for voice in found.json()["voices"]] == ["af_heart", "bf_emma"]
    premade = client.get("/elevenlabs/v2/voices", params={"category": "cloned"}, headers=KEY).json()
    assert premade == {"voices": [], "has_more": False, "total_count": 0, "next_page_token": None}


# --- WebSockets ---------------------------------------------------------------------------------------------------


def until_final(ws: WebSocketTestSession, finals: int = 1) -> list[dict[str, Any]]:
    messages = []
    while finals:
        message = ws.receive_json()
        messages.append(message)
        finals -= message.get("isFinal") is True
    return messages


def audio_of(messages: list[dict[str, Any]], context: str | None = None) -> bytes:
    return b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio") and m.get("contextId") == context)


@pytest.mark.slow
def test_stream_input_speaks_until_the_empty_text(client: TestClient) -> None:
    with client.websocket_connect(f"{SAY}/stream-input?output_format=pcm_16000", headers=KEY) as ws:
        ws.send_json(
            {"text": " ", "voice_settings": {"stability": 0.5}, "generation_config": {"chunk_length_schedule": [50]}}
        )
        for token in ("Hello ", "there, ", "how ", "are ", "you?"):
            ws.send_json({"text": token})
        ws.send_json({"text": ""})
        messages = until_final(ws)
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()
    samples = np.frombuffer(audio_of(messages), dtype="<i2")
    assert samples.size / 16000 > 0.8 and loud(samples)
    found = [m["alignment"] for m in messages if m.get("alignment")]
    assert "".join(c for a in found for c in a["chars"]).strip() == "Hello there, how are you?"
    spans = sum(a["charStartTimesMs"][-1] + a["charDurationsMs"][-1] for a in found)
    assert spans == pytest.approx(samples.size / 16, abs=50)  # each message's span adds up to the audio


@pytest.mark.slow
def test_multi_stream_contexts_each_end_with_is_final(client: TestClient) -> None:
    url = f"{SAY}/multi-stream-input?output_format=pcm_24000&inactivity_timeout=30"
    with client.websocket_connect(url, headers=KEY) as ws:
        ws.send_json({"text": " ", "context_id": "a"})
        ws.send_json({"text": " ", "context_id": "b"})
        ws.send_json({"text": "This is the first context. ", "context_id": "a"})
        ws.send_json({"text": "And this the second one. ", "context_id": "b", "flush": True})
        ws.send_json({"text": "", "context_id": "a"})  # a keep-alive
        ws.send_json({"context_id": "a", "flush": True})
        ws.send_json({"context_id": "a", "close_context": True})
        ws.send_json({"context_id": "b", "close_context": True})
        messages = until_final(ws, 2)
        ws.send_json({"text": "Again. ", "context_id": "a"})
        reused = ws.receive_json()
        ws.send_json({"close_socket": True})
    for context in ("a", "b"):
        assert len(audio_of(messages, context)) / 2 / 24000 > 1.0
        assert {"isFinal": True, "contextId": context} in messages
    assert reused["error"] == "context_closed" and reused["contextId"] == "a"


@pytest.mark.slow
def test_closing_an_unflushed_context_stops_it_at_once(client: TestClient, app: InProcessApp) -> None:
    long = "This is a long answer that the listener interrupts before it is over. " * 6
    with client.websocket_connect(f"{SAY}/multi-stream-input?output_format=pcm_16000", headers=KEY) as ws:
        ws.send_json({"text": long, "context_id": "turn"})
        first = ws.receive_json()
        assert first.get("audio") and first["contextId"] == "turn"
        ws.send_json({"context_id": "turn", "close_context": True})
        rest = until_final(ws)
        ws.send_json({"close_socket": True})
    heard = len(base64.b64decode(first["audio"])) + len(audio_of(rest, "turn"))
    assert heard / 2 / 16000 < 8  # far less than the whole answer's ~25 s
    assert "multi-stream-input outcome=cancelled" in app.log()


def test_socket_refusals(client: TestClient) -> None:
    for url, status in [
        (f"{SAY}/stream-input?output_format=pcm_1", 422),
        (f"{BASE}/text-to-speech/nobody/multi-stream-input", 404),
    ]:
        with pytest.raises(WebSocketDisconnect), client.websocket_connect(url, headers=KEY):
            pass
        del status  # the test client sees a denied handshake as a close; the real server's status is in e2e
    with pytest.raises(WebSocketDisconnect), client.websocket_connect(f"{SAY}/stream-input"):
        pass
    with client.websocket_connect(f"{SAY}/stream-input?output_format=pcm_16000&xi-api-key=sk-el") as ws:
        ws.send_text("{not json")
        assert ws.receive_json()["error"] == "invalid_message"


def test_too_many_contexts_are_refused(client: TestClient) -> None:
    with client.websocket_connect(f"{SAY}/multi-stream-input?output_format=pcm_16000", headers=KEY) as ws:
        for index in range(6):
            ws.send_json({"text": "Wait", "context_id": f"c{index}"})
        refused = ws.receive_json()
        while "error" not in refused:
            refused = ws.receive_json()
        ws.send_json({"close_socket": True})
    assert refused["error"] == "too_many_contexts" and refused["contextId"] == "c5"


RUN_ON = "we keep talking on and on without a single mark to cut at until the very end"
"""Longer than a 50-character schedule, shorter than the first phrase the node's own caps wait for (120)."""


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    """A node that never speaks a partial phrase for its producer's pause (only the segmenter or a flush cuts
    phrases): a request whose text is left unspoken ends after 30 s with `live_idle_timeout` instead."""
    with InProcessApp(
        tmp_path_factory.mktemp("patient"), POLYTTS_LIVE_FLUSH_MS="60000", POLYTTS_LIVE_IDLE_TIMEOUT_S="30"
    ) as running:
        yield running


@pytest.mark.slow
def test_a_small_chunk_length_schedule_starts_the_audio_after_fewer_characters(patient: InProcessApp) -> None:
    # ElevenLabs' default schedule asks what the node does anyway: a first phrase of 60, cut at 120 at the most.
    assert GenerationConfig(chunk_length_schedule=[120, 160, 250, 290]).phrase_chars() == (60, 290)
    with patient.client.websocket_connect(f"{SAY}/multi-stream-input?output_format=pcm_16000") as ws:
        ws.send_json({"text": " ", "context_id": "small", "generation_config": {"chunk_length_schedule": [50]}})
        ws.send_json({"text": " ", "context_id": "plain"})
        for word in RUN_ON.split():  # as a language model writes it, and nothing flushed
            ws.send_json({"text": word + " ", "context_id": "small"})
            ws.send_json({"text": word + " ", "context_id": "plain"})
        early = [ws.receive_json()]
        while not early[-1].get("alignment"):
            early.append(ws.receive_json())
        for context in ("small", "plain"):
            ws.send_json({"context_id": context, "flush": True})
            ws.send_json({"context_id": context, "close_context": True})
        rest = until_final(ws, 2)
        ws.send_json({"text": " ", "context_id": "bad", "generation_config": {"chunk_length_schedule": [5]}})
        refused = ws.receive_json()
        ws.send_json({"close_socket": True})
    assert {message["contextId"] for message in early} == {"small"} and audio_of(early, "small")
    first_phrase = "".join(early[-1]["alignment"]["chars"])
    assert 0 < len(first_phrase) <= 50 and RUN_ON.startswith(first_phrase)
    plain = next(
        message["alignment"] for message in rest if message.get("alignment") and message["contextId"] == "plain"
    )
    assert "".join(plain["chars"]) == RUN_ON + " "  # one phrase: the node's own caps waited for the flush
    assert refused["error"] == "invalid_input" and "chunk_length_schedule" in refused["message"]
    assert refused["contextId"] == "bad"


@pytest.mark.slow
def test_auto_mode_speaks_each_message_as_its_own_phrase(patient: InProcessApp) -> None:
    """Pipecat's sentences come without a trailing space and without a flush until the turn ends, LiveKit's each
    with a flush and then an empty flush: each is spoken at once, and no word runs into the next message's first; a
    close before the flush that ends the text is still a barge-in."""
    url = f"{SAY}/multi-stream-input?output_format=pcm_16000&auto_mode=true"
    with patient.client.websocket_connect(url) as ws:
        ws.send_json({"text": " ", "context_id": "turn"})
        ws.send_json({"text": "The first sentence ends here.", "context_id": "turn"})
        heard = [ws.receive_json()]
        while not heard[-1].get("alignment"):  # spoken with nothing after it: not held for the next message
            heard.append(ws.receive_json())
        ws.send_json({"text": "And the second follows it.", "context_id": "turn"})
        ws.send_json({"context_id": "turn", "flush": True})
        ws.send_json({"context_id": "turn", "close_context": True})
        heard += until_final(ws)
        cancelled = patient.log().count("multi-stream-input outcome=cancelled")
        cut = {"text": "This answer is interrupted before it is spoken at all. ", "context_id": "cut", "flush": True}
        ws.send_json(cut)  # as LiveKit sends each sentence
        ws.send_json({"context_id": "cut", "close_context": True})
        until_final(ws)
        ws.send_json({"close_socket": True})
    chars = "".join(c for m in heard if m.get("alignment") and not m.get("error") for c in m["alignment"]["chars"])
    assert chars == "The first sentence ends here. And the second follows it. "
    assert patient.log().count("multi-stream-input outcome=cancelled") == cancelled + 1


# --- A client that leaves ------------------------------------------------------------------------------------------

LONG = "This is a long answer that the listener walks away from before it is over. " * 8
"""About 45 s of speech: far more than is spoken before a cancel is seen."""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "ending"),
    [
        ("stream-input", [{"text": ""}]),  # stream-input's end of text
        ("multi-stream-input", [{"context_id": "turn", "flush": True}, {"context_id": "turn", "close_context": True}]),
        ("multi-stream-input", [{"context_id": "turn", "flush": True}, {"close_socket": True}]),
    ],
    ids=["ended-text", "flushed-and-closed", "close-socket"],
)
def test_a_client_that_leaves_after_ending_its_text_stops_the_work(
    client: TestClient, app: InProcessApp, route: str, ending: list[dict[str, Any]]
) -> None:
    before = outcomes(app, f"/{route}")
    with client.websocket_connect(f"{SAY}/{route}?output_format=pcm_16000", headers=KEY) as ws:
        ws.send_json({"text": LONG, **({"context_id": "turn"} if route.startswith("multi") else {})})
        for message in ending:
            ws.send_json(message)
        assert ws.receive_json().get("audio")
        ws.close()  # the client goes away after its first audio
        line = outcome_line(app, f"/{route}", before)
    assert " outcome=cancelled " in line, line
    assert 0 < spoken_chars(line) < len(LONG) / 2, line  # the characters actually spoken, not the whole text
    assert re.search(rf'outcome="cancelled",route="[^"]*/{route}"', client.get("/metrics").text)


@pytest.mark.slow
def test_a_second_close_of_a_closing_context_stops_it(client: TestClient, app: InProcessApp) -> None:
    """Pipecat's barge-in after the end of a turn: the context was flushed and closed (its text is being spoken to
    the end), and a second close drops what it still has queued."""
    before = outcomes(app, "/multi-stream-input")
    with client.websocket_connect(f"{SAY}/multi-stream-input?output_format=pcm_16000", headers=KEY) as ws:
        ws.send_json({"text": LONG, "context_id": "turn", "flush": True})
        ws.send_json({"context_id": "turn", "close_context": True})
        assert ws.receive_json().get("audio")
        ws.send_json({"context_id": "turn", "close_context": True})
        rest = until_final(ws)
        line = outcome_line(app, "/multi-stream-input", before)
        ws.send_json({"close_socket": True})
    assert rest[-1] == {"isFinal": True, "contextId": "turn"}
    assert " outcome=cancelled " in line and spoken_chars(line) < len(LONG) / 2, line


@pytest.mark.slow
def test_the_inactivity_timeout_counts_once_the_closed_contexts_have_finished(client: TestClient) -> None:
    url = f"{SAY}/multi-stream-input?output_format=pcm_16000&inactivity_timeout=1"
    with client.websocket_connect(url, headers=KEY) as ws:
        ws.send_json({"text": "A short answer. ", "context_id": "turn", "flush": True})
        ws.send_json({"context_id": "turn", "close_context": True})
        heard = until_final(ws)
        idle = ws.receive_json()  # nothing more is sent: the socket ends after inactivity_timeout
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()
    assert audio_of(heard, "turn") and idle["error"] == "inactivity_timeout", idle


def awaiting_text(client: TestClient) -> int:
    return int(client.get("/health", headers=KEY).json()["inflight"]["awaiting_text"])


def test_contexts_with_nothing_to_say_yet_hold_live_places_across_sockets(
    client: TestClient, app: InProcessApp
) -> None:
    """Contexts opened by the initial `{"text": " "}` or a bare flush wait for text as live requests: the node's bound
    per client address (8 here) counts them across every multi-stream-input socket, the next is ElevenLabs' error
    message for that context, and one closed frees its place."""
    url = f"{SAY}/multi-stream-input?output_format=pcm_16000"
    ended = outcomes(app, "multi-stream-input")
    with client.websocket_connect(url, headers=KEY) as first, client.websocket_connect(url, headers=KEY) as second:
        for index in range(5):
            first.send_json({"text": " ", "context_id": f"a{index}"})
        for index in range(3):
            second.send_json({"text": "", "flush": True, "context_id": f"b{index}"})
        wait_until(lambda: awaiting_text(client) == 8, 30, "eight contexts waiting for text")
        second.send_json({"text": " ", "context_id": "b3"})
        refused = second.receive_json()
        assert (refused["error"], refused["contextId"]) == ("live_sessions_full", "b3")
        assert second.receive_json() == {"isFinal": True, "contextId": "b3"}
        first.send_json({"context_id": "a0", "close_context": True})
        assert first.receive_json() == {"isFinal": True, "contextId": "a0"}
        wait_until(lambda: awaiting_text(client) == 7, 30, "the closed context's place to be free")
        second.send_json({"text": " ", "context_id": "b4"})
        wait_until(lambda: awaiting_text(client) == 8, 30, "the new context to hold the place")
        for ws in (first, second):
            ws.send_json({"close_socket": True})  # every context ends, with nothing said
            assert {final["contextId"] for final in until_final(ws, 4)} == (
                {"a1", "a2", "a3", "a4"} if ws is first else {"b0", "b1", "b2", "b4"}
            )
    wait_until(lambda: awaiting_text(client) == 0, 30, "every context to end with its sockets")
    lines = [line for line in app.log().splitlines() if "multi-stream-input outcome=" in line][ended:]
    assert sum("outcome=live_sessions_full" in line for line in lines) == 1
    assert sum("outcome=ok " in line and " chars=0 " in line for line in lines) == 9  # each context its own line
