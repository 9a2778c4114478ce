"""The Cartesia front end to end: the official `cartesia` client and Pipecat's Cartesia services, with nothing changed
but their base URL and key, against a real server on the Kokoro ONNX model."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from cartesia import APIStatusError, Cartesia

from bench import asr
from tests.support.servers import ServerProcess, no_tracebacks
from tests.support.voice_agents import PIPECAT_PATIENCE_S, TimedWord, check_timings, pipecat_speak, speech

VOICE = "af_heart"
ANSWER = "The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone was happy."
"""An agent's answer of two sentences: the pause between them is where timings are held against the sound."""
KEY = "sk-cartesia"
RAW_16K: Any = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("cartesia"), POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_API_KEYS=f'{{"{KEY}": "carte"}}'
    ).start()
    yield server
    no_tracebacks(server)
    server.stop()


@pytest.fixture
def client(node: ServerProcess) -> Cartesia:
    return Cartesia(
        api_key=KEY,
        base_url=node.url + "/cartesia",
        websocket_base_url=node.url.replace("http", "ws") + "/cartesia",
        timeout=120,
    )


def test_sdk_bytes_as_wav_and_raw_float(client: Cartesia) -> None:
    wav = client.tts.generate(
        model_id="sonic-3",
        transcript=ANSWER,
        voice={"id": VOICE},
        output_format={"container": "wav", "encoding": "pcm_f32le", "sample_rate": 44100},
    ).read()
    samples, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
    assert rate == 44100 and 4.0 < samples.size / rate < 9.0 and speech((samples * 32767).astype(np.int16))
    raw = client.tts.generate(
        model_id="sonic-3",
        transcript=ANSWER,
        voice=VOICE,
        output_format={"container": "raw", "encoding": "pcm_f32le", "sample_rate": 16000},
    ).read()
    floats = np.frombuffer(raw, dtype="<f4")
    assert floats.size / 16000 == pytest.approx(samples.size / 44100, abs=0.03)


def test_sdk_sse_timestamps_match_the_audio(client: Cartesia) -> None:
    events = list(
        client.tts.generate_sse(
            model_id="sonic-3",
            transcript=ANSWER,
            voice={"id": VOICE},
            output_format=RAW_16K,
            add_timestamps=True,
        )
    )
    assert events[-1].type == "done"
    samples = np.frombuffer(b"".join(e.audio or b"" for e in events if e.type == "chunk"), dtype="<i2")
    words: list[TimedWord] = [
        (word, start, end)
        for event in events
        if event.type == "timestamps"
        for word, start, end in zip(
            event.word_timestamps.words, event.word_timestamps.start, event.word_timestamps.end, strict=True
        )
    ]
    assert [word for word, _, _ in words] == ANSWER.split() and speech(samples)
    assert check_timings(samples, 16000, words) >= 1


def test_sdk_websocket_contexts_flush_and_timestamps(client: Cartesia) -> None:
    with client.tts.websocket_connect() as connection:
        context = connection.context(
            model_id="sonic-3", voice={"id": VOICE}, output_format=RAW_16K, add_timestamps=True
        )
        for token in ANSWER.split(" "):
            context.push(token + " ")
        context.push("", flush=True)
        context.no_more_inputs()
        received = list(context.receive())
    assert received[-1].type == "done"
    samples = np.frombuffer(b"".join(base64.b64decode(e.data) for e in received if e.type == "chunk"), dtype="<i2")
    assert [e.flush_id for e in received if e.type == "flush_done"] == [1]
    words: list[TimedWord] = [
        (word, start, end)
        for event in received
        if event.type == "timestamps" and event.word_timestamps is not None
        for word, start, end in zip(
            event.word_timestamps.words, event.word_timestamps.start, event.word_timestamps.end, strict=True
        )
    ]
    assert [word for word, _, _ in words] == ANSWER.split() and speech(samples)
    assert check_timings(samples, 16000, words) >= 1


def sdk_speech(client: Cartesia, transport: str, pieces: list[str]) -> np.ndarray:
    """The SDK's speech of `pieces` (one transcript over HTTP; pushed one by one on the WebSocket), at 16 kHz."""
    if transport == "bytes":
        audio = client.tts.generate(
            model_id="sonic-3", transcript="".join(pieces), voice={"id": VOICE}, output_format=RAW_16K
        ).read()
    elif transport == "sse":
        events = client.tts.generate_sse(
            model_id="sonic-3", transcript="".join(pieces), voice={"id": VOICE}, output_format=RAW_16K
        )
        audio = b"".join(event.audio or b"" for event in events if event.type == "chunk")
    else:
        with client.tts.websocket_connect() as connection:
            context = connection.context(model_id="sonic-3", voice={"id": VOICE}, output_format=RAW_16K)
            for piece in pieces:
                context.push(piece)
            context.no_more_inputs()
            received = list(context.receive())
        assert received[-1].type == "done", received[-1]
        audio = b"".join(base64.b64decode(event.data) for event in received if event.type == "chunk")
    return np.frombuffer(audio, dtype="<i2")


@pytest.mark.parametrize("transport", ["bytes", "sse", "websocket"])
def test_sdk_reads_cartesia_tags_break_spell_and_speed(client: Cartesia, transport: str) -> None:
    """Cartesia's tags through the SDK, in real audio (split across pushes on the WebSocket): `<break>` is that much
    silence, `<spell>` says a word's letters (longer than the word), `<speed ratio>` shortens what follows it."""
    broken = sdk_speech(client, transport, ["One. <bre", 'ak time="1', 's"/> Two.'])
    quiet = asr.silences(broken.astype(np.float32) / 32768, 16_000, 0.5)
    assert len(quiet) == 1 and abs((quiet[0][1] - quiet[0][0]) - 1.0) < 0.1, quiet
    word, spelled = (
        sdk_speech(client, transport, ["Say NASA."]),
        sdk_speech(client, transport, ["Say <spell>NASA</spell>."]),
    )
    assert spelled.size > 1.2 * word.size and speech(spelled)  # 1.33 measured: four letter names
    plain = sdk_speech(client, transport, [ANSWER])
    fast = sdk_speech(client, transport, ['<speed ratio="1.5"/>', ANSWER])
    assert fast.size < 0.85 * plain.size and speech(fast)


def test_sdk_lists_and_gets_the_nodes_voices(client: Cartesia) -> None:
    listed = list(client.voices.list(limit=25))  # page after page, as the SDK iterates
    assert len(listed) == len({voice.id for voice in listed}) > 50  # every stock voice, once
    heart = client.voices.get(VOICE)
    assert (heart.id, heart.language, heart.gender, heart.locales[0].locale) == (VOICE, "en", "feminine", "en-US")
    assert heart in listed


def test_sdk_pronunciation_dicts_are_kept_paged_edited_said_and_deleted(client: Cartesia) -> None:
    def said(**options: Any) -> int:
        spoken = client.tts.generate(
            model_id="sonic-3", transcript="Zorblax.", voice={"id": VOICE}, output_format=RAW_16K, **options
        )
        return len(spoken.read())

    alias = "a banana split with whipped cream and two cherries on the top"
    made = client.pronunciation_dicts.create(name="brands", items=[{"text": "Zorblax", "alias": alias}])
    other = client.pronunciation_dicts.create(name="others", items=[{"text": "Quux", "alias": "kwucks"}])
    assert client.pronunciation_dicts.retrieve(made.id).items[0].alias == alias
    listed = [found.id for found in client.pronunciation_dicts.list(limit=1)]  # one a page, as the SDK pages
    assert {made.id, other.id} <= set(listed) and len(listed) == len(set(listed))
    plain, long = said(), said(pronunciation_dict_id=made.id)
    assert long > 2.5 * plain, (long, plain)
    client.pronunciation_dicts.update(made.id, items=[{"text": "Zorblax", "alias": "zed"}])  # a new version
    assert said(pronunciation_dict_id=made.id) < long / 2
    client.pronunciation_dicts.delete(made.id)
    with pytest.raises(APIStatusError) as raised:
        client.pronunciation_dicts.retrieve(made.id)
    assert raised.value.status_code == 404


def test_sdk_errors(client: Cartesia, node: ServerProcess) -> None:
    with pytest.raises(APIStatusError) as raised:
        client.tts.generate(model_id="sonic-3", transcript=ANSWER, voice="nobody", output_format=RAW_16K).read()
    assert raised.value.status_code == 404
    assert raised.value.body["error_code"] == "voice_not_found"  # type: ignore[index]
    wrong = Cartesia(api_key="wrong", base_url=node.url + "/cartesia", max_retries=0)
    with pytest.raises(APIStatusError) as raised:
        wrong.tts.generate(model_id="sonic-3", transcript=ANSWER, voice=VOICE, output_format=RAW_16K).read()
    assert raised.value.status_code == 401


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_pipecat_cartesia_services(node: ServerProcess, transport: str) -> None:
    import aiohttp
    from pipecat.services.cartesia.tts import CartesiaHttpTTSService, CartesiaTTSService

    async def run() -> tuple[np.ndarray, list[TimedWord]]:
        if transport == "websocket":
            socket = CartesiaTTSService(
                api_key=KEY,
                url=node.url.replace("http", "ws") + "/cartesia/tts/websocket",
                settings=CartesiaTTSService.Settings(voice=VOICE),
                stop_frame_timeout_s=PIPECAT_PATIENCE_S,
            )
            return await pipecat_speak(socket, ANSWER, 16000)
        async with aiohttp.ClientSession() as session:
            service = CartesiaHttpTTSService(
                api_key=KEY,
                base_url=node.url + "/cartesia",
                aiohttp_session=session,
                settings=CartesiaHttpTTSService.Settings(voice=VOICE),
                stop_frame_timeout_s=PIPECAT_PATIENCE_S,
            )
            return await pipecat_speak(service, ANSWER, 16000)

    samples, words = asyncio.run(run())
    assert 4.0 < samples.size / 16000 < 9.0 and speech(samples)
    if transport == "websocket":  # the HTTP service reads no timings
        assert [word for word, _, _ in words] == ANSWER.split()
        assert check_timings(samples, 16000, words) >= 1
