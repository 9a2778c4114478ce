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


class WireLog:
    """A Pipecat service's socket as the test sees it: in order, every message the node sent on it (audio as its byte
    count, JSON by its `type`) and every message the service sent (as `> type`); what Pipecat left unread when it
    closed the socket is read too."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.timeline: list[int | str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.connection, name)

    def note(self, message: bytes | str) -> None:
        self.timeline.append(len(message) if isinstance(message, bytes) else json.loads(message)["type"])

    async def __aiter__(self) -> Any:
        async for message in self.connection:
            self.note(message)
            yield message

    async def send(self, message: str) -> None:
        self.timeline.append("> " + json.loads(message)["type"])
        await self.connection.send(message)

    async def close(self) -> None:
        await self.connection.close()
        async for message in self.connection:  # what came before the node's close, which Pipecat no longer reads
            self.note(message)


def test_pipecat_interruption_clears(node: ServerProcess) -> None:
    """A user speaks over the answer: Pipecat's DeepgramTTSService sends `Clear`. The node answers `Cleared`, sends no
    audio of the cleared answer after it, and the next answer is its own text only."""
    from pipecat.frames.frames import (
        EndFrame,
        Frame,
        InterruptionFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSStoppedFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.deepgram.tts import DeepgramTTSService

    sockets: list[WireLog] = []

    class Recorded(DeepgramTTSService):
        async def _websocket_connect(self, uri: str, **kwargs: Any) -> Any:
            sockets.append(WireLog(await super()._websocket_connect(uri, **kwargs)))
            return sockets[-1]

    def cleared() -> bool:
        return any("Cleared" in socket.timeline for socket in list(sockets))

    cancelled = node.log().count("deepgram/v1/speak outcome=cancelled")
    heard: list[bytes] = []
    began, stopped = asyncio.Event(), asyncio.Event()

    class Collect(FrameProcessor):
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                heard.append(frame.audio)
                began.set()
            elif isinstance(frame, TTSStoppedFrame):
                stopped.set()
            await self.push_frame(frame, direction)

    def answer(text: str) -> list[Frame]:
        tokens = [LLMTextFrame(word + " ") for word in text.split()]
        return [LLMFullResponseStartFrame(), *tokens, LLMFullResponseEndFrame()]

    async def run() -> bytes:
        service = Recorded(
            api_key=KEY,
            base_url=node.url.replace("http", "ws", 1) + "/deepgram",
            settings=DeepgramTTSService.Settings(voice=MODEL),
            stop_frame_timeout_s=PIPECAT_PATIENCE_S,
        )
        task = PipelineTask(
            Pipeline([service, Collect()]), params=PipelineParams(audio_out_sample_rate=16000), idle_timeout_secs=60
        )
        running = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
        try:
            await task.queue_frames(answer(LONG))
            await asyncio.wait_for(began.wait(), 120)  # the long answer has begun to play
            await task.queue_frame(InterruptionFrame())  # the user speaks over it
            await asyncio.to_thread(wait_until, cleared, 30, "the node to answer Cleared", detail=lambda: sockets)
            heard.clear()
            stopped.clear()
            await task.queue_frames(answer(SENTENCE))
            await asyncio.wait_for(stopped.wait(), 120)
            await task.queue_frame(EndFrame())
            await asyncio.wait_for(running, 60)
        finally:
            await task.cancel()
        return b"".join(heard)

    after = asyncio.run(run())
    timeline = next(socket.timeline for socket in sockets if "Cleared" in socket.timeline)
    clear, answered = timeline.index("> Clear"), timeline.index("Cleared")
    following = [*timeline[answered:], "> Speak"]
    until_next = following[: following.index("> Speak")]
    assert clear < answered and not any(isinstance(item, int) for item in until_next), timeline  # no audio after
    cut = sum(item for item in timeline[:answered] if isinstance(item, int))
    assert cut / 2 / 16000 < 20  # far less than the long answer's ~35 s
    samples = np.frombuffer(after, dtype="<i2")
    assert 1.5 < samples.size / 16000 < 5.0 and speech(samples)  # the next answer, none of the cleared one
    assert node.log().count("deepgram/v1/speak outcome=cancelled") > cancelled
