"""Damaged disks and hostile clients in this process: clear answers, the service stays up, and no client error logs a
traceback. (What needs the server's own process, its memory or raw sockets, is in tests/e2e/test_server_hostile.py.)"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx2
import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

from engines.base import SynthesisOptions
from tests.support.apps import InProcessApp
from tests.support.clips import decode_wav, wav_clip
from tests.support.polling import wait_until
from tests.support.servers import no_tracebacks, outcome_line, outcomes, spoken_chars
from tests.support.voices import npy, pack_values

SENTENCE = "Damaged files never stop the server."


def register_pack(client: TestClient, seed: int) -> str:
    reply = client.post("/voices", files={"voice_pack": ("v.npy", npy(pack_values(seed)))}, data={"engine": "kokoro"})
    assert reply.status_code in (200, 201), reply.text
    return str(reply.json()["voice_id"])


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    """The embedded Kokoro ONNX default, without the in-memory WAV cache so that every repeat reads the disk cache."""
    with InProcessApp(tmp_path_factory.mktemp("hostile"), POLYTTS_WAV_CACHE_BYTES="0") as running:
        yield running


# --- a damaged voices folder at start-up ---------------------------------------------------------------------------


def clip_folder(root: Path, name: str, meta: object, audio: bytes | None = None) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "voice.wav").write_bytes(wav_clip(1.0) if audio is None else audio)
    (folder / "meta.json").write_text(meta if isinstance(meta, str) else json.dumps(meta), encoding="utf-8")


def pack_folder(root: Path, name: str, meta: object, data: bytes) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "voice_pack.npy").write_bytes(data)
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


@pytest.mark.slow
def test_a_damaged_voices_folder_never_stops_the_server(tmp_path: Path, assembled_model: Path) -> None:
    from engines.kokoro.voicepacks import pack_id

    voices, cache = tmp_path / "voices", tmp_path / "cache" / "pcm"
    good_clip = "00000000000000a1"
    clip_folder(voices, good_clip, {"engine": "qwen", "ref_text": "hello", "duration_s": 1.0, "sample_rate": 16_000})
    good_pack = pack_id(pack_values(1))
    pack_folder(voices, good_pack, {"engine": "kokoro", "kind": "pack", "created_at": 1.0}, npy(pack_values(1)))
    clip_meta = {"engine": "qwen", "ref_text": "x", "duration_s": 1.0, "sample_rate": 16_000}
    pack_meta = {"engine": "kokoro", "kind": "pack", "created_at": 1.0}
    damaged = {
        "0000000000000b01": lambda n: pack_folder(
            voices, n, {**pack_meta, "created_at": "yesterday"}, npy(pack_values(2))
        ),
        "0000000000000b02": lambda n: clip_folder(voices, n, {**clip_meta, "created_at": "yesterday"}),
        "0000000000000b03": lambda n: clip_folder(voices, n, {**clip_meta, "created_at": 1e300}),
        "0000000000000b04": lambda n: clip_folder(voices, n, '{"engine": "qwen", "created_at": 1e999}'),
        "0000000000000b05": lambda n: clip_folder(voices, n, {**clip_meta, "sample_rate": "fast"}),
        "0000000000000b06": lambda n: clip_folder(voices, n, {**clip_meta, "x_vector_only_mode": "no"}),
        "0000000000000b07": lambda n: clip_folder(voices, n, {**clip_meta, "engine": ["qwen"]}),
        "0000000000000b08": lambda n: clip_folder(voices, n, "{not json"),
        "0000000000000b09": lambda n: clip_folder(voices, n, "[" * 50_000 + "]" * 50_000),
        "0000000000000b0a": lambda n: clip_folder(voices, n, clip_meta, audio=os.urandom(5000)),
        "0000000000000b0b": lambda n: clip_folder(voices, n, clip_meta, audio=wav_clip(1.0)[:9000]),
        "0000000000000b0c": lambda n: clip_folder(voices, n, clip_meta, audio=b""),
        "0000000000000b0d": lambda n: pack_folder(voices, n, pack_meta, os.urandom(2000)),
        "0000000000000b0e": lambda n: pack_folder(voices, n, pack_meta, npy(pack_values(3))[:-1000]),
        "0000000000000b0f": lambda n: pack_folder(voices, n, pack_meta, npy(np.array([{}], object), True)),
    }
    for name, make in damaged.items():
        make(name)
    (voices / "0000000000000b02" / "seed.wav").write_bytes(b"RIFF")
    cache.mkdir(parents=True)
    (cache / f"{'a' * 64}.pcm").write_bytes(b"\0" * 4000)  # an entry in the landed version's format
    (cache / f"{'b' * 64}.pcm").write_bytes(os.urandom(333))

    with InProcessApp(tmp_path) as server:
        client = server.client
        assert client.get("/health").json()["status"] == "ready"
        listed = sorted(v["voice_id"] for v in client.get("/voices").json()["voices"] if not v["builtin"])
        assert listed == sorted([good_clip, good_pack])
        spoken = client.post("/tts", json={"text": SENTENCE, "voice_id": good_pack})
        assert spoken.status_code == 200, spoken.text
        log = server.log()
        for name in damaged:
            lines = [line for line in log.splitlines() if name in line]
            assert len(lines) == 1 and " WARNING " in lines[0], (name, lines)
        assert "removed 2 entries" in log
        assert not any(p.startswith(("a" * 64, "b" * 64)) for p in os.listdir(cache))
        no_tracebacks(server)


FASTEST = {"speed": 4.0}
"""Kokoro's fastest rate, for the tests whose point is not the audio: a quarter of it to make for each synthesis."""


# --- damaged cache entries under a running server -----------------------------------------------------------------


CACHE_DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "odd length": lambda p: p.write_bytes(p.read_bytes()[:-1]),
    "random bytes": lambda p: p.write_bytes(os.urandom(p.stat().st_size)),
}


@pytest.mark.slow
def test_a_damaged_cache_entry_is_a_miss_and_the_audio_is_right(client: TestClient, app: InProcessApp) -> None:
    body = {"text": "The cache is checked.", "language": "en", **FASTEST}
    first = client.post("/tts/stream", json=body)
    assert first.status_code == 200 and first.headers["X-Cache"] == "miss"
    again = client.post("/tts/stream", json=body)
    assert again.headers["X-Cache"] == "hit" and again.content == first.content
    (entry,) = (app.tmp / "cache" / "pcm").glob("*.pcm")
    for name, damage in CACHE_DAMAGE.items():
        damage(entry)
        repaired = client.post("/tts/stream", json=body)
        assert repaired.status_code == 200 and repaired.headers["X-Cache"] == "miss", name
        assert repaired.content == first.content, name
        assert client.post("/tts/stream", json=body).headers["X-Cache"] == "hit", name
    no_tracebacks(app)


# --- hostile registrations ------------------------------------------------------------------------------------------


def raw_post(client: TestClient, body: bytes, boundary: str = "b") -> httpx2.Response:
    return client.post("/voices", content=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})


def form(*parts: tuple[str, str | None, bytes], boundary: str = "b") -> bytes:
    out = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


CLIP_FORM = (("engine", None, b"qwen"), ("ref_text", None, b"hello"), ("audio", "a.wav", wav_clip(1.0, 700)))
HOSTILE_FORMS = {
    "boundary mismatch": (form(*CLIP_FORM, boundary="other"), 400, "malformed_multipart"),
    "garbage": (os.urandom(3000), 400, "malformed_multipart"),
    "no closing boundary": (form(*CLIP_FORM)[:-8], 400, "malformed_multipart"),
    "a file name of 10,000 characters": (
        form(("engine", None, b"qwen"), ("ref_text", None, b"x"), ("audio", "a" * 10_000 + ".wav", wav_clip())),
        400,
        "filename_too_long",
    ),
    "engine given twice": (form(*CLIP_FORM, ("engine", None, b"voxcpm")), 422, "duplicate_field"),
}


@pytest.mark.parametrize(("body", "status", "code"), list(HOSTILE_FORMS.values()), ids=list(HOSTILE_FORMS))
def test_hostile_registrations_get_clear_answers(
    client: TestClient, app: InProcessApp, body: bytes, status: int, code: str
) -> None:
    before = sorted(os.listdir(app.tmp / "voices"))
    reply = raw_post(client, body)
    assert reply.status_code == status and reply.json()["code"] == code, reply.text
    assert sorted(os.listdir(app.tmp / "voices")) == before
    no_tracebacks(app)


def test_an_unknown_engine_with_a_pack_says_so(client: TestClient) -> None:
    reply = client.post("/voices", files={"voice_pack": ("v.npy", npy(pack_values(9)))}, data={"engine": "nope"})
    assert reply.status_code == 422 and reply.json()["code"] == "unknown_engine"
    assert reply.json()["message"].startswith("unknown engine 'nope'")


def test_an_id_with_a_trailing_newline_is_not_that_voice(client: TestClient, app: InProcessApp) -> None:
    voice_id = register_pack(client, 5)
    assert client.get(f"/voices/{voice_id}").status_code == 200
    for path in (f"/voices/{voice_id}%0A", f"/voices/{voice_id}%0D%0A"):
        assert client.get(path).status_code in (404, 422)
        assert client.delete(path).status_code in (404, 422)
    assert client.get(f"/voices/{voice_id}").status_code == 200
    no_tracebacks(app)


@pytest.mark.slow
def test_a_pack_damaged_under_the_running_server_answers_its_own_error(client: TestClient, app: InProcessApp) -> None:
    voice_id = register_pack(client, 6)
    (app.tmp / "voices" / voice_id / "voice_pack.npy").write_bytes(npy(pack_values(7)))  # another pack's values
    for _ in range(3):
        reply = client.post("/tts", json={"text": SENTENCE, "voice_id": voice_id})
        assert reply.status_code == 500 and reply.json()["code"] == "voice_damaged", reply.text
        assert voice_id in reply.json()["message"]
    logged = [line for line in app.log().splitlines() if "polytts.artefacts" in line and voice_id in line]
    assert len(logged) == 1 and "is damaged" in logged[0]
    no_tracebacks(app)
    # Deleting it and registering it again repairs it.
    assert client.delete(f"/voices/{voice_id}").status_code == 200
    assert register_pack(client, 6) == voice_id
    assert client.post("/tts", json={"text": SENTENCE, "voice_id": voice_id}).status_code == 200


# --- text whose work is out of proportion to its length as written ---------------------------------------------------

MONEY = "$999,999,999,999.99 "


def test_money_that_multiplies_when_spoken_is_refused_naming_the_limit(client: TestClient, app: InProcessApp) -> None:
    reply = client.post("/tts/stream", json={"text": MONEY * 250, "voice": "af_heart"})  # 5,000 characters
    assert reply.status_code == 413 and reply.json()["code"] == "spoken_too_long", reply.text
    message = reply.json()["message"]
    assert "4999 characters as written and 38749 as spoken" in message and "POLYTTS_MAX_SPOKEN_CHARS" in message
    no_tracebacks(app)


@pytest.mark.parametrize(
    ("text", "script"),
    [(("שלום עולם " * 500)[:5000], "Hebrew"), ("你好世界，" * 40, "Han"), ("Привет, мир! " * 20, "Cyrillic")],
)
def test_a_script_an_english_voice_cannot_read_is_refused_when_nothing_else_is_left(
    client: TestClient, text: str, script: str
) -> None:
    reply = client.post("/tts/stream", json={"text": text, "voice": "af_heart"})
    assert reply.status_code == 422 and reply.json()["code"] == "unreadable_text", reply.text
    assert script in reply.json()["message"]


EMOJI = "😀🎉👋🏽✅❤️" * 60  # 300 emoji, as clients send them (with a skin tone and a presentation selector)


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/tts", {"text": EMOJI, "voice": "af_heart"}),
        ("/tts/stream", {"text": EMOJI, "voice": "af_heart"}),
        ("/v1/audio/speech", {"model": "tts-1", "input": EMOJI, "voice": "alloy"}),
    ],
)
def test_emoji_alone_are_nothing_to_speak_on_every_route(client: TestClient, route: str, body: dict[str, str]) -> None:
    reply = client.post(route, json=body)
    error = reply.json()["error"] if route.startswith("/v1/") else reply.json()  # OpenAI's own error shape
    assert reply.status_code == 422 and error["code"] == "unreadable_text", reply.text
    assert "emoji" in error["message"]


def test_emoji_beside_words_are_left_out_not_read_by_name(client: TestClient, app: InProcessApp) -> None:
    before = outcomes(app, "tts")
    mixed = client.post("/tts", json={"text": "Well done " + EMOJI + " see you.", "voice": "af_heart"})
    assert mixed.status_code == 200, mixed.text
    assert spoken_chars(outcome_line(app, "tts", before)) == len("Well done see you.")  # counted as spoken
    alone = client.post("/tts", json={"text": "Well done see you.", "voice": "af_heart"})
    assert alone.headers["x-cache"] == "hit" and alone.content == mixed.content  # the same audio


@pytest.mark.slow
def test_a_script_an_english_voice_cannot_read_is_skipped_beside_english(client: TestClient) -> None:
    mixed = client.post("/tts", json={"text": "Peace is " + "שלום " * 40 + "in Hebrew.", "voice": "af_heart"})
    assert mixed.status_code == 200, mixed.text
    samples, rate = decode_wav(mixed.content)
    assert len(samples) / rate < 3.0  # spelled out, the 200 Hebrew characters alone were 70 s
    # the same text as spoken: the same audio, from the cache
    alone = client.post("/tts", json={"text": "Peace is in Hebrew.", "voice": "af_heart"})
    assert alone.headers["x-cache"] == "hit" and alone.content == mixed.content


@pytest.mark.slow
def test_each_step_speaks_at_most_one_chunk_cap_of_spoken_characters(
    client: TestClient, app: InProcessApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = client.app.state.service.pool.engines["kokoro"]  # type: ignore[attr-defined]
    real = engine.stream
    steps: list[str] = []

    def recorded(text: str, voice: object, options: SynthesisOptions) -> Iterator[np.ndarray]:
        steps.append(text)  # what the GPU thread gave the real engine, one chunk a step
        return real(text, voice, options)

    monkeypatch.setattr(engine, "stream", recorded)
    reply = client.post("/tts/stream", json={"text": "Pay " + MONEY * 2 + "today.", "voice": "af_heart", **FASTEST})
    assert reply.status_code == 200 and reply.content, reply.text
    assert len(steps) >= 3 and all(len(text) <= app.settings.chunk_chars for text in steps), steps
    assert " ".join(steps).startswith("Pay nine hundred ninety-nine billion") and steps[-1].endswith("today.")


# --- a full disk ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_full_disk_answers_507_and_leaves_nothing(tmp_path: Path, small_disk: Path, assembled_model: Path) -> None:
    with InProcessApp(tmp_path, POLYTTS_VOICES_DIR=str(small_disk / "voices")) as server:
        client = server.client
        big = io.BytesIO()
        sf.write(big, np.zeros(16_000 * 50, np.float32), 16_000, format="WAV", subtype="PCM_24")  # 2.4 MB
        reply = client.post(
            "/voices", files={"audio": ("a.wav", big.getvalue())}, data={"engine": "qwen", "ref_text": "x"}
        )
        assert reply.status_code == 507 and reply.json()["code"] == "insufficient_storage", reply.text
        assert "no space left" in reply.json()["message"]
        assert os.listdir(small_disk / "voices") == []
        small = client.post(
            "/voices", files={"audio": ("a.wav", wav_clip(1.0))}, data={"engine": "qwen", "ref_text": "x"}
        )
        assert small.status_code == 201
        no_tracebacks(server)


# --- deeply nested JSON on the live routes and sockets -------------------------------------------------------------

DEEP = "[" * 2000 + "]" * 2000
"""Enough nesting for a recursive parser to give up: a clear error of each protocol, never a crash or a held place."""
HELLO = json.dumps({"text": "Hello there, how are you? ", "voice": "af_heart"})


def idle(client: TestClient) -> bool:
    inflight = client.get("/health").json()["inflight"]
    return inflight["running"] == inflight["waiting"] == inflight["awaiting_text"] == 0


def socket_events(client: TestClient, url: str, messages: list[str]) -> tuple[list[dict[str, object]], int]:
    """Send the messages, then read the socket's JSON events until the node closes it, and its close code."""
    events = []
    with client.websocket_connect(url) as ws:
        for message in messages:
            ws.send_text(message)
        while (received := ws.receive())["type"] != "websocket.close":
            if received.get("text"):
                events.append(json.loads(received["text"]))
    return events, received["code"]


def test_deep_json_as_a_live_requests_first_line_is_its_error(client: TestClient, app: InProcessApp) -> None:
    refused = client.post("/tts/live", content=(DEEP + "\n").encode())
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_message", refused.text
    assert "nested" in refused.json()["message"]
    no_tracebacks(app)


@pytest.mark.slow
def test_deep_json_after_a_good_live_line_ends_the_request(client: TestClient, app: InProcessApp) -> None:
    before = outcomes(app, "tts/live")
    answer = client.post("/tts/live", content=f"{HELLO}\n{DEEP}\n".encode())
    assert answer.status_code == 200  # the audio had begun: the body is cut
    assert " outcome=invalid_message " in outcome_line(app, "tts/live", before)
    assert idle(client)
    no_tracebacks(app)


@pytest.mark.slow
@pytest.mark.parametrize("first", [[], [json.dumps({"text": "Hello there. "})]], ids=["first", "after-a-good-one"])
def test_deep_json_on_the_live_socket_is_an_error_event_and_a_close(
    client: TestClient, app: InProcessApp, first: list[str]
) -> None:
    events, code = socket_events(client, "/tts/live/ws?voice_id=af_heart", [*first, DEEP])
    assert events[-1]["type"] == "error" and events[-1]["code"] == "invalid_message", events
    assert code == 1000
    wait_until(lambda: idle(client), 30, "the live place to be free", detail=lambda: client.get("/health").json())
    no_tracebacks(app)


@pytest.mark.parametrize("first", [[], [json.dumps({"text": " "})]], ids=["first", "on-an-open-stream"])
def test_deep_json_on_elevenlabs_stream_input_is_its_error_and_a_close(
    client: TestClient, app: InProcessApp, first: list[str]
) -> None:
    url = "/elevenlabs/v1/text-to-speech/af_heart/stream-input?output_format=pcm_16000"
    events, code = socket_events(client, url, [*first, DEEP])
    assert {"error": "invalid_message", "message": "a live message is nested more than 16 deep"} in events, events
    assert code == 1000
    no_tracebacks(app)


def test_deep_json_on_the_cartesia_socket_is_its_error_event(client: TestClient, app: InProcessApp) -> None:
    with client.websocket_connect("/cartesia/tts/websocket") as ws:
        ws.send_text(DEEP)
        error = ws.receive_json()
    assert error["type"] == "error" and error["error_code"] == "invalid_message" and error["status_code"] == 422
    no_tracebacks(app)


# --- word timings from the disk cache ------------------------------------------------------------------------------


@pytest.mark.slow
def test_word_timings_come_from_the_disk_cache_and_are_checked_like_the_audio(
    client: TestClient, app: InProcessApp
) -> None:
    """A request with word timings is a hit once an identical one stored its timings beside its audio (an untimed
    one's audio alone is a miss for it, and then has them); a damaged timings entry is a miss, and the answer is the
    same. This app keeps nothing in memory: every repeat reads the disk."""
    text = "Timings are kept with the audio."
    cache = app.tmp / "cache" / "pcm"
    assert client.post("/tts", json={"text": text, **FASTEST}).headers["X-Cache"] == "miss"
    audio_only = set(cache.glob("*.pcm"))
    first = client.post("/tts", json={"text": text, "timestamps": True, **FASTEST})
    assert first.status_code == 200 and first.headers["X-Cache"] == "miss"
    (words_entry,) = set(cache.glob("*.pcm")) - audio_only
    again = client.post("/tts", json={"text": text, "timestamps": True, **FASTEST})
    assert again.headers["X-Cache"] == "hit" and again.json() == first.json()
    assert [w["word"] for w in again.json()["words"]] == text.split()
    captions = client.post("/tts", json={"text": text, "format": "vtt", **FASTEST})
    assert captions.status_code == 200 and "Timings" in captions.text
    for name, damage in CACHE_DAMAGE.items():
        damage(words_entry)
        repaired = client.post("/tts", json={"text": text, "timestamps": True, **FASTEST})
        assert repaired.headers["X-Cache"] == "miss" and repaired.json() == first.json(), name
        assert client.post("/tts", json={"text": text, "timestamps": True, **FASTEST}).headers["X-Cache"] == "hit", name
    no_tracebacks(app)
