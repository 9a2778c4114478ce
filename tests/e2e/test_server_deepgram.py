"""The Deepgram front end to end: the official `deepgram-sdk` (REST and WebSocket speak), Pipecat's Deepgram services
and LiveKit's `deepgram.TTS`, with nothing changed but their base URL and key, against a real server on the Kokoro
ONNX model: real audio at the rate each client assumes, flushes answered after their audio, a barge-in that stops the
work, and bad input answered in Deepgram's shape while the node serves on."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from deepgram import DeepgramClient
from deepgram.core.api_error import ApiError
from deepgram.environment import DeepgramClientEnvironment
from deepgram.speak.v1.types import SpeakV1Clear, SpeakV1Close, SpeakV1Flush, SpeakV1Text
from websockets.exceptions import InvalidStatus

from tests.support.polling import wait_until
from tests.support.servers import ServerProcess, no_tracebacks
from tests.support.voice_agents import PIPECAT_PATIENCE_S, heard, patient, pipecat_speak, speak_streamed, speech

KEY = "sk-deepgram"
MODEL = "aura-2-thalia-en"
SENTENCE = "The quick brown fox jumps over the lazy dog."
ANSWER = "The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone was happy."
LONG = " ".join([ANSWER] * 6)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("deepgram"), POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_API_KEYS=f'{{"{KEY}": "dg"}}'
    ).start()
    yield server
    no_tracebacks(server)
    server.stop()


def sdk(node: ServerProcess, key: str = KEY) -> DeepgramClient:
    """The official client with its environment pointed at the node, as its docs say for a self-hosted Deepgram."""
    base, socket = node.url + "/deepgram", node.url.replace("http", "ws", 1) + "/deepgram"
    environment = DeepgramClientEnvironment(base=base, production=socket, agent=socket, agent_rest=base)
    return DeepgramClient(api_key=key, environment=environment)


def test_sdk_rest_speak_raw_and_wav(node: ServerProcess) -> None:
    client = sdk(node)
    raw = b"".join(
        client.speak.v1.audio.generate(
            text=ANSWER, model=MODEL, encoding="linear16", sample_rate=16000, container="none"
        )
    )
    samples = np.frombuffer(raw, dtype="<i2")
    assert 4.0 < samples.size / 16000 < 9.0 and speech(samples)
    wav = b"".join(client.speak.v1.audio.generate(text=SENTENCE, model=MODEL, encoding="alaw", sample_rate=8000))
    info = soundfile.info(io.BytesIO(wav))
    assert (info.samplerate, info.subtype) == (8000, "ALAW")
    mp3 = b"".join(client.speak.v1.audio.generate(text=SENTENCE, model="aura-asteria-en"))  # the REST default
    assert mp3[:3] == b"ID3" or mp3[0] == 0xFF


def socket_events(connection: Any, until: str) -> tuple[bytes, list[Any]]:
    """The audio and the messages of the SDK's socket up to its first message of type `until` (included)."""
    audio, messages = b"", []
    for message in connection:
        if isinstance(message, bytes):
            audio += message
            continue
        messages.append(message)
        if message.type == until:
            break
    return audio, messages


def test_sdk_socket_flush_then_clear(node: ServerProcess) -> None:
    client = sdk(node)
    with client.speak.v1.connect(model=MODEL, encoding="linear16", sample_rate="16000") as connection:
        for word in ANSWER.split():
            connection.send_text(SpeakV1Text(text=word + " "))
        connection.send_flush(SpeakV1Flush(type="Flush"))
        audio, messages = socket_events(connection, "Flushed")
        assert [m.type for m in messages] == ["Metadata", "Flushed"] and messages[0].model_name == MODEL
        samples = np.frombuffer(audio, dtype="<i2")
        assert 4.0 < samples.size / 16000 < 10.0 and speech(samples)
        connection.send_text(SpeakV1Text(text=LONG))
        connection.send_flush(SpeakV1Flush(type="Flush"))
        first = next(iter(connection))
        assert isinstance(first, bytes)  # the long answer has begun
        connection.send_clear(SpeakV1Clear(type="Clear"))
        cut, messages = socket_events(connection, "Cleared")
        assert [m.type for m in messages] == ["Cleared"]  # its flush is never answered
        assert (len(first) + len(cut)) / 2 / 16000 < 20  # far less than the long answer's ~35 s
        connection.send_text(SpeakV1Text(text=SENTENCE))
        connection.send_flush(SpeakV1Flush(type="Flush"))
        after, messages = socket_events(connection, "Flushed")
        assert [m.type for m in messages] == ["Flushed"] and speech(np.frombuffer(after, dtype="<i2"))
        connection.send_close(SpeakV1Close(type="Close"))
    assert "deepgram/v1/speak outcome=cancelled" in node.log()


def test_sdk_errors_and_the_node_serves_on(node: ServerProcess) -> None:
    client = sdk(node)
    refusals: list[tuple[dict[str, Any], str, int, str]] = [
        ({"model": "aura-2-nobody-en"}, SENTENCE, 404, "model_not_found"),
        ({"encoding": "linear16", "sample_rate": 11025}, SENTENCE, 422, "invalid_output_format"),
        ({"encoding": "opus", "container": "wav"}, SENTENCE, 422, "invalid_output_format"),
        ({}, "word " * 20000, 413, "text_too_long"),
    ]
    for options, text, status, code in refusals:
        with pytest.raises(ApiError) as raised:
            b"".join(client.speak.v1.audio.generate(text=text, **options))
        assert raised.value.status_code == status and raised.value.body["err_code"] == code, options
    with pytest.raises(ApiError) as raised:
        b"".join(sdk(node, "wrong").speak.v1.audio.generate(text=SENTENCE))
    assert raised.value.status_code == 401
    with pytest.raises(InvalidStatus) as refused, sdk(node, "wrong").speak.v1.connect(model=MODEL):
        pass
    assert refused.value.response.status_code == 401
    with client.speak.v1.connect(model=MODEL, encoding="mulaw", sample_rate="8000") as connection:
        connection._websocket.send("{not json")  # what no SDK sends: the socket warns and serves on
        connection._websocket.send(json.dumps({"type": "Sing", "text": "la"}))
        connection.send_text(SpeakV1Text(text=SENTENCE))
        connection.send_flush(SpeakV1Flush(type="Flush"))
        audio, messages = socket_events(connection, "Flushed")
    assert [m.type for m in messages] == ["Metadata", "Warning", "Warning", "Flushed"]
    assert 1.5 < len(audio) / 8000 < 6.0  # μ-law: a byte a sample


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_pipecat_deepgram_services(node: ServerProcess, transport: str) -> None:
    import aiohttp
    from pipecat.services.deepgram.tts import DeepgramHttpTTSService, DeepgramTTSService

    async def run() -> np.ndarray:
        if transport == "websocket":
            socket = DeepgramTTSService(
                api_key=KEY,
                base_url=node.url.replace("http", "ws", 1) + "/deepgram",
                settings=DeepgramTTSService.Settings(voice=MODEL),
                stop_frame_timeout_s=PIPECAT_PATIENCE_S,
            )
            samples, _ = await pipecat_speak(socket, ANSWER, 16000)
            return samples
        async with aiohttp.ClientSession() as session:
            service = DeepgramHttpTTSService(
                api_key=KEY,
                base_url=node.url + "/deepgram",
                aiohttp_session=session,
                settings=DeepgramHttpTTSService.Settings(voice=MODEL),
                stop_frame_timeout_s=PIPECAT_PATIENCE_S,
            )
            samples, _ = await pipecat_speak(service, ANSWER, 16000)
            return samples

    samples = asyncio.run(run())
    assert 4.0 < samples.size / 16000 < 10.0 and speech(samples)


def livekit_tts(node: ServerProcess, session: object, **options: Any) -> Any:
    from livekit.plugins import deepgram

    url = node.url + "/deepgram/v1/speak"  # the plugin's base_url is the whole speak URL
    return deepgram.TTS(api_key=KEY, base_url=url, model=MODEL, http_session=session, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("rate", [24000, 8000])
def test_livekit_synthesize_at_its_rate(node: ServerProcess, rate: int) -> None:
    import aiohttp

    async def run() -> tuple[np.ndarray, set[int]]:
        async with aiohttp.ClientSession() as session:
            tts = livekit_tts(node, session, sample_rate=rate)
            try:
                samples, rates, _, _ = await heard(tts.synthesize(SENTENCE, conn_options=patient()))
                return samples, rates
            finally:
                await tts.aclose()

    samples, rates = asyncio.run(run())
    assert rates == {rate} and 2.0 < samples.size / rate < 5.0 and speech(samples)


def test_livekit_stream_then_interrupted(node: ServerProcess) -> None:
    """A turn streamed word by word (the plugin flushes at the end of its input and waits for `Flushed`), then a
    barge-in: the stream is closed while its answer is being spoken, the plugin retires its pooled socket and closes
    it (`Flush`, `Close`) when the next turn takes a connection: the node stops the interrupted work."""
    import aiohttp

    cancelled = node.log().count("deepgram/v1/speak outcome=cancelled")

    def stopped() -> bool:
        return node.log().count("deepgram/v1/speak outcome=cancelled") > cancelled

    async def run() -> np.ndarray:
        async with aiohttp.ClientSession() as session:
            tts = livekit_tts(node, session, sample_rate=16000)
            try:
                samples, rates, _, _ = await speak_streamed(tts, ANSWER)
                assert rates == {16000}
                stream = tts.stream(conn_options=patient())
                for word in LONG.split():
                    stream.push_text(word + " ")
                await anext(aiter(stream))  # the answer has begun to play
                await stream.aclose()  # the user speaks over it: the plugin retires that socket ...
                after, *_ = await speak_streamed(tts, SENTENCE)  # ... and closes it at the next turn
                await asyncio.to_thread(wait_until, stopped, 30, "the interrupted request to stop", detail=node.log)
                assert speech(after)
                return samples
            finally:
                await tts.aclose()

    samples = asyncio.run(run())
    assert 4.0 < samples.size / 16000 < 10.0 and speech(samples)
