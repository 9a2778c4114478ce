"""The ElevenLabs front end to end: the official `elevenlabs` client and Pipecat's ElevenLabs services, with nothing
changed but their base URL and key, against a real server on the Kokoro ONNX model."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
from elevenlabs import ElevenLabs
from elevenlabs.core import ApiError

from tests.support.servers import ServerProcess, no_tracebacks

VOICE = "af_heart"
SENTENCE = "The quick brown fox jumps over the lazy dog."
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


def speech(samples: np.ndarray) -> bool:
    """Not silence: the loudest 50 ms windows are well above the noise floor."""
    windows = samples[: samples.size // 800 * 800].reshape(-1, 800).astype(np.float64)
    return float(np.sqrt((windows**2).mean(axis=1)).max()) > 1000


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
    import base64

    timed = client.text_to_speech.convert_with_timestamps(VOICE, text=SENTENCE, output_format="pcm_24000")
    seconds = len(base64.b64decode(timed.audio_base_64)) / 2 / 24000
    alignment = timed.alignment
    assert alignment is not None and "".join(alignment.characters) == SENTENCE
    starts, ends = alignment.character_start_times_seconds, alignment.character_end_times_seconds
    assert starts == sorted(starts) and ends[-1] <= seconds + 0.01 and ends[-1] > seconds - 0.5
    chunks = list(client.text_to_speech.stream_with_timestamps(VOICE, text=SENTENCE, output_format="pcm_24000"))
    assert "".join(c for chunk in chunks if chunk.alignment for c in chunk.alignment.characters) == SENTENCE


def test_sdk_voices_and_errors(client: ElevenLabs) -> None:
    voices = client.voices.get_all().voices
    assert VOICE in {voice.voice_id for voice in voices}
    assert client.voices.get(VOICE).category == "premade"
    with pytest.raises(ApiError) as raised:
        b"".join(client.text_to_speech.convert("nobody", text=SENTENCE))
    assert raised.value.status_code == 404 and raised.value.body["detail"]["status"] == "voice_not_found"
    wrong = ElevenLabs(base_url=client._client_wrapper.get_base_url(), api_key="wrong")
    with pytest.raises(ApiError) as raised:
        b"".join(wrong.text_to_speech.convert(VOICE, text=SENTENCE))
    assert raised.value.status_code == 401


async def pipecat_speak(service: object, text: str, rate: int) -> tuple[bytes, int, list[tuple[str, float]]]:
    """Run `service` in a Pipecat pipeline as an agent would: speak a language model's `text` as its tokens come,
    collect the audio and the words with their presentation times."""
    from pipecat.frames.frames import (
        EndFrame,
        Frame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSStoppedFrame,
        TTSTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    heard = bytearray()
    rates: set[int] = set()
    words: list[tuple[str, float]] = []
    stopped = asyncio.Event()

    class Collect(FrameProcessor):
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                heard.extend(frame.audio)
                rates.add(frame.sample_rate)
            elif isinstance(frame, TTSTextFrame) and frame.pts is not None:
                words.append((frame.text, frame.pts / 1e9))
            elif isinstance(frame, TTSStoppedFrame):
                stopped.set()
            await self.push_frame(frame, direction)

    task = PipelineTask(
        Pipeline([service, Collect()]),  # type: ignore[list-item]
        params=PipelineParams(audio_out_sample_rate=rate),
        idle_timeout_secs=60,
    )
    tokens = [LLMTextFrame(word + " ") for word in text.split()]  # a language model's answer, token by token
    await task.queue_frames([LLMFullResponseStartFrame(), *tokens, LLMFullResponseEndFrame()])
    running = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
    await asyncio.wait_for(stopped.wait(), 120)  # the answer is spoken: the agent's turn is over
    await task.queue_frame(EndFrame())
    await asyncio.wait_for(running, 60)
    assert rates == {rate}
    return bytes(heard), rate, words


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_pipecat_elevenlabs_services(node: ServerProcess, transport: str) -> None:
    import aiohttp
    from pipecat.services.elevenlabs.tts import ElevenLabsHttpTTSService, ElevenLabsTTSService

    async def run() -> tuple[bytes, int, list[tuple[str, float]]]:
        if transport == "websocket":
            socket = ElevenLabsTTSService(
                api_key=KEY,
                url=node.url.replace("http", "ws") + "/elevenlabs",
                settings=ElevenLabsTTSService.Settings(voice=VOICE),
            )
            return await pipecat_speak(socket, SENTENCE, 16000)
        async with aiohttp.ClientSession() as session:
            service = ElevenLabsHttpTTSService(
                api_key=KEY,
                base_url=node.url + "/elevenlabs",
                aiohttp_session=session,
                settings=ElevenLabsHttpTTSService.Settings(voice=VOICE),
            )
            return await pipecat_speak(service, SENTENCE, 16000)

    audio, rate, words = asyncio.run(run())
    samples = np.frombuffer(audio, dtype="<i2")
    seconds = samples.size / rate
    assert 2.0 < seconds < 5.0 and speech(samples)
    assert [word for word, _ in words][:3] == ["The", "quick", "brown"]
    times = [at for _, at in words]
    assert times == sorted(times)
