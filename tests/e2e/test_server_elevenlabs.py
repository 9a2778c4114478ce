"""The ElevenLabs front end to end: the official `elevenlabs` client and Pipecat's ElevenLabs services, with nothing
changed but their base URL and key, against a real server on the Kokoro ONNX model."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from elevenlabs import ElevenLabs, realtime_tts
from elevenlabs.core import ApiError

from bench import asr
from tests.support.servers import ServerProcess, no_tracebacks, outcome_line, outcomes, spoken_chars
from tests.support.voice_agents import (
    PIPECAT_PATIENCE_S,
    TimedWord,
    check_timings,
    pipecat_speak,
    speech,
    words_of_characters,
)

VOICE = "af_heart"
SENTENCE = "The quick brown fox jumps over the lazy dog."
ANSWER = "The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone was happy."
"""An agent's answer of two sentences: the pause between them is where timings are held against the sound."""
KEY = "sk-eleven"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("elevenlabs"), POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_API_KEYS=f'{{"{KEY}": "eleven"}}'
    ).start()
    yield server
    no_tracebacks(server)
    server.stop()


@pytest.fixture
def client(node: ServerProcess) -> ElevenLabs:
    return ElevenLabs(base_url=node.url + "/elevenlabs", api_key=KEY, timeout=120)


def test_sdk_convert_pcm_at_the_rate_it_asks(client: ElevenLabs) -> None:
    audio = b"".join(
        client.text_to_speech.convert(VOICE, text=SENTENCE, model_id="eleven_flash_v2_5", output_format="pcm_16000")
    )
    samples = np.frombuffer(audio, dtype="<i2")
    assert 2.0 < samples.size / 16000 < 5.0 and speech(samples)


def test_sdk_stream_mp3_decodes_at_44100(client: ElevenLabs) -> None:
    audio = b"".join(client.text_to_speech.stream(VOICE, text=SENTENCE, output_format="mp3_44100_128"))
    with av.open(io.BytesIO(audio), mode="r") as container:
        frames = list(container.decode(audio=0))
    assert frames[0].sample_rate == 44100
    assert 2.0 < sum(frame.samples for frame in frames) / 44100 < 5.0


def test_sdk_timestamps_match_the_audio(client: ElevenLabs) -> None:
    timed = client.text_to_speech.convert_with_timestamps(VOICE, text=ANSWER, output_format="pcm_24000")
    samples = np.frombuffer(base64.b64decode(timed.audio_base_64), dtype="<i2")
    alignment = timed.alignment
    assert alignment is not None and "".join(alignment.characters) == ANSWER and speech(samples)
    starts, ends = alignment.character_start_times_seconds, alignment.character_end_times_seconds
    assert starts == sorted(starts) and ends[-1] > samples.size / 24000 - 0.5
    assert check_timings(samples, 24000, words_of_characters(alignment.characters, starts, ends)) >= 1
    chunks = list(client.text_to_speech.stream_with_timestamps(VOICE, text=ANSWER, output_format="pcm_24000"))
    assert "".join(c for chunk in chunks if chunk.alignment for c in chunk.alignment.characters) == ANSWER


def test_sdk_voices_and_errors(client: ElevenLabs) -> None:
    voices = client.voices.get_all().voices
    assert VOICE in {voice.voice_id for voice in voices}
    assert client.voices.get(VOICE).category == "premade"
    searched = client.voices.search(search="af_", page_size=5)
    assert len(searched.voices) == 5 and searched.has_more and searched.next_page_token
    more = client.voices.search(search="af_", page_size=5, next_page_token=searched.next_page_token)
    assert {v.voice_id for v in more.voices}.isdisjoint(v.voice_id for v in searched.voices)
    models = client.models.list()
    assert "kokoro" in {model.model_id for model in models}
    with pytest.raises(ApiError) as raised:
        b"".join(client.text_to_speech.convert("nobody", text=SENTENCE))
    assert raised.value.status_code == 404 and raised.value.body["detail"]["status"] == "voice_not_found"
    wrong = ElevenLabs(base_url=client._client_wrapper.get_base_url(), api_key="wrong")
    with pytest.raises(ApiError) as raised:
        b"".join(wrong.text_to_speech.convert(VOICE, text=SENTENCE))
    assert raised.value.status_code == 401


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_pipecat_elevenlabs_services(node: ServerProcess, transport: str) -> None:
    import aiohttp
    from pipecat.services.elevenlabs.tts import ElevenLabsHttpTTSService, ElevenLabsTTSService

    async def run() -> tuple[np.ndarray, list[TimedWord]]:
        if transport == "websocket":
            socket = ElevenLabsTTSService(
                api_key=KEY,
                url=node.url.replace("http", "ws") + "/elevenlabs",
                settings=ElevenLabsTTSService.Settings(voice=VOICE),
                stop_frame_timeout_s=PIPECAT_PATIENCE_S,
            )
            return await pipecat_speak(socket, ANSWER, 16000)
        async with aiohttp.ClientSession() as session:
            service = ElevenLabsHttpTTSService(
                api_key=KEY,
                base_url=node.url + "/elevenlabs",
                aiohttp_session=session,
                settings=ElevenLabsHttpTTSService.Settings(voice=VOICE),
                stop_frame_timeout_s=PIPECAT_PATIENCE_S,
            )
            return await pipecat_speak(service, ANSWER, 16000)

    samples, words = asyncio.run(run())
    assert 4.0 < samples.size / 16000 < 9.0 and speech(samples)
    assert [word for word, _, _ in words] == ANSWER.split()
    assert check_timings(samples, 16000, words) >= 1


# --- A client that leaves ------------------------------------------------------------------------------------------

LONG = [f"This is sentence {index} of a long answer that the listener walks away from. " for index in range(8)]
"""About 40 s of speech: far more than is spoken before a cancel is seen."""


def cancelled_line(node: ServerProcess, route: str, before: int) -> str:
    """The next `route` request's log line: it was cancelled, with only part of its text spoken."""
    line = outcome_line(node, route, before)
    assert " outcome=cancelled " in line and 0 < spoken_chars(line) < len("".join(LONG)) / 2, line
    return line


def realtime_over_plain_ws(monkeypatch: pytest.MonkeyPatch, query: str = "") -> None:
    """The SDK's `convert_realtime` over plain ws:// (it always says wss://), `query` added to the URL it builds (it
    has no argument for the socket's other query parameters, such as `enable_ssml_parsing`)."""
    from websockets.sync.client import connect

    def plain(url: str, **options: Any) -> Any:
        return connect(url.replace("wss://", "ws://", 1) + query, **options)

    monkeypatch.setattr(realtime_tts, "connect", plain)


def one_silence(samples: np.ndarray, rate: int) -> float:
    """The one silence of half a second or more in `samples`, in seconds."""
    quiet = asr.silences(samples.astype(np.float32) / 32768, rate, 0.5)
    assert len(quiet) == 1, quiet
    return quiet[0][1] - quiet[0][0]


def test_sdk_break_tag_is_that_much_silence_over_http_and_the_realtime_socket(
    client: ElevenLabs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `<break time="1.2s"/>` in the text: over HTTP (`convert`, whose speech routes read the bare tags), and over
    the SDK's realtime helper with `enable_ssml_parsing=true`, where its text chunker splits the tag across
    messages; the break is measured in the audio."""
    text = 'One. <break time="1.2s"/> Two.'
    heard = b"".join(client.text_to_speech.convert(VOICE, text=text, output_format="pcm_24000"))
    assert abs(one_silence(np.frombuffer(heard, dtype="<i2"), 24_000) - 1.2) < 0.1
    realtime_over_plain_ws(monkeypatch, "&enable_ssml_parsing=true")
    pieces = iter(["One. <break ", 'time="1.2s"/> Two.'])  # sent as two messages, the tag cut after `<break `
    streamed = b"".join(client.text_to_speech.convert_realtime(VOICE, text=pieces, output_format="pcm_24000"))
    assert abs(one_silence(np.frombuffer(streamed, dtype="<i2"), 24_000) - 1.2) < 0.1


def test_sdk_realtime_left_after_its_text_stops_the_work(
    client: ElevenLabs, node: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's `convert_realtime` (stream-input) sends all the text and its end, then the caller stops reading
    after the first audio: the SDK closes its socket, and the node stops."""
    realtime_over_plain_ws(monkeypatch)
    before = outcomes(node, "/stream-input")
    audio = client.text_to_speech.convert_realtime(VOICE, text=iter(LONG), output_format="pcm_16000")
    assert isinstance(audio, Generator) and next(audio)
    audio.close()
    cancelled_line(node, "/stream-input", before)


@pytest.mark.parametrize(
    "ending",
    [[{"context_id": "turn", "flush": True}, {"context_id": "turn", "close_context": True}], [{"close_socket": True}]],
    ids=["flushed-and-closed", "close-socket"],
)
def test_a_socket_left_after_its_text_stops_the_work(node: ServerProcess, ending: list[dict[str, object]]) -> None:
    import websockets

    url = node.url.replace("http", "ws") + f"/elevenlabs/v1/text-to-speech/{VOICE}/multi-stream-input"

    async def run() -> None:
        async with websockets.connect(f"{url}?output_format=pcm_16000", additional_headers={"xi-api-key": KEY}) as ws:
            await ws.send(json.dumps({"text": "".join(LONG), "context_id": "turn", "flush": True}))
            for message in ending:
                await ws.send(json.dumps(message))
            assert json.loads(await ws.recv()).get("audio")

    before = outcomes(node, "/multi-stream-input")
    asyncio.run(run())
    cancelled_line(node, "/multi-stream-input", before)


def test_pipecat_barge_in_after_the_turn_stops_the_work(node: ServerProcess) -> None:
    """Pipecat ends its turn (flush, close_context), then the user speaks over the answer: Pipecat's interruption
    closes the socket (close_socket, then its own close) and opens another, and the node stops the closed turn."""
    from pipecat.frames.frames import (
        EndFrame,
        Frame,
        InterruptionFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

    before = outcomes(node, "/multi-stream-input")

    async def run() -> None:
        playing = asyncio.Event()

        class Listen(FrameProcessor):
            async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
                await super().process_frame(frame, direction)
                if isinstance(frame, TTSAudioRawFrame):
                    playing.set()
                await self.push_frame(frame, direction)

        service = ElevenLabsTTSService(
            api_key=KEY,
            url=node.url.replace("http", "ws") + "/elevenlabs",
            settings=ElevenLabsTTSService.Settings(voice=VOICE),
            stop_frame_timeout_s=PIPECAT_PATIENCE_S,
        )
        task = PipelineTask(Pipeline([service, Listen()]), params=PipelineParams(audio_out_sample_rate=16000))
        tokens = [LLMTextFrame(word + " ") for word in "".join(LONG).split()]
        await task.queue_frames([LLMFullResponseStartFrame(), *tokens, LLMFullResponseEndFrame()])
        running = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
        await asyncio.wait_for(playing.wait(), 120)  # the answer has begun to play, its turn is over
        await task.queue_frame(InterruptionFrame())  # the user speaks over it
        await asyncio.to_thread(outcome_line, node, "/multi-stream-input", before)
        await task.queue_frame(EndFrame())
        await asyncio.wait_for(running, 60)

    asyncio.run(run())
    cancelled_line(node, "/multi-stream-input", before)


SOCKET_END_BOUND_S = 20.0
"""Far less than the live idle limit (60 s), which a malformed frame's socket used to wait out."""


def test_a_malformed_message_ends_the_stream_input_socket_at_once(node: ServerProcess) -> None:
    """The first message, then one that is not JSON: the error, `isFinal`, then the close, each time (the context's
    cancel used to be lost when it came with the first message, and the socket waited out the idle limit)."""
    import websockets

    url = node.url.replace("http", "ws") + f"/elevenlabs/v1/text-to-speech/{VOICE}/stream-input?output_format=pcm_16000"

    async def one_socket() -> tuple[list[dict[str, Any]], int | None]:
        async with websockets.connect(url, additional_headers={"xi-api-key": KEY}) as ws:
            await ws.send(json.dumps({"text": " "}))
            await ws.send("{not json")
            heard = [json.loads(message) async for message in ws]
            return heard, ws.close_code

    async def sockets() -> list[tuple[list[dict[str, Any]], int | None]]:
        async with asyncio.timeout(SOCKET_END_BOUND_S):
            return [await one_socket() for _ in range(5)]

    for heard, code in asyncio.run(sockets()):
        assert heard[0]["error"] == "invalid_message" and heard[-1] == {"isFinal": True} and code == 1000, heard
