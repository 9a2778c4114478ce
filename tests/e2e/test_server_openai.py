"""The OpenAI speech API end to end: the official `openai` client against a real server on the Kokoro ONNX model."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import openai
import pytest

from bench.common import PROBE
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess
from tests.support.voice_agents import PIPECAT_PATIENCE_S, TimedWord, pipecat_speak, speech

SENTENCE = "The quick brown fox jumps over the lazy dog."
LONG = " ".join(
    f"This is sentence number {i} of a long answer that the client plays while it is made." for i in range(2)
)
"""Two steps or more (about 10 s of speech): the first bytes arrive while the rest is still being made."""
VOICE = "af_heart"
KEYED = {"Authorization": "Bearer sk-good"}  # /health shows load only to a key, on a node with keys


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("openai"),
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_API_KEYS='{"sk-good": "openai-client"}',
    ).start()
    yield server
    server.stop()


@pytest.fixture
def client(node: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=node.url + "/v1", api_key="sk-good", max_retries=0, timeout=120)


def decoded_seconds(data: bytes) -> float:
    """The duration of encoded audio, decoded with PyAV (FFmpeg)."""
    with av.open(io.BytesIO(data), mode="r") as container:
        samples = rate = 0
        for frame in container.decode(audio=0):
            samples += frame.samples
            rate = frame.sample_rate
    return samples / rate


def pcm_seconds(node: ServerProcess, text: str) -> float:
    response = PROBE.post(node.url + "/tts/stream", json={"text": text, "voice": VOICE}, headers=KEYED, timeout=120)
    return len(response.content) / 2 / int(response.headers["x-sample-rate"])


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_format_decodes_to_the_length_of_the_pcm(client: openai.OpenAI, node: ServerProcess, fmt: str) -> None:
    audio = client.audio.speech.create(model="tts-1", voice=VOICE, input=SENTENCE, response_format=fmt)  # type: ignore[arg-type]
    expected = pcm_seconds(node, SENTENCE)
    if fmt == "pcm":
        seconds = len(audio.content) / 2 / 24_000
        assert audio.response.headers["x-sample-rate"] == "24000"
    else:
        seconds = decoded_seconds(audio.content)
    assert seconds == pytest.approx(expected, rel=0.1), fmt
    assert audio.response.headers["content-type"].startswith(
        {
            "mp3": "audio/mpeg",
            "opus": "audio/ogg",
            "aac": "audio/aac",
            "flac": "audio/flac",
            "wav": "audio/wav",
            "pcm": "application/octet-stream",
        }[fmt]
    )


def test_streaming_response_gets_bytes_while_generation_runs(client: openai.OpenAI, node: ServerProcess) -> None:
    running_at_first_bytes = None
    total = 0
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice=VOICE, input=LONG, response_format="mp3"
    ) as response:
        for chunk in response.iter_bytes():
            if running_at_first_bytes is None:
                health = PROBE.get(node.url + "/health", headers=KEYED, timeout=10).json()
                running_at_first_bytes = health["inflight"]["running"]
            total += len(chunk)
    assert running_at_first_bytes == 1  # the synthesis was still under way when the first bytes arrived
    assert total > 10_000


def test_sse_yields_deltas_then_done(client: openai.OpenAI, node: ServerProcess) -> None:
    events = []
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice=VOICE, input=SENTENCE, response_format="pcm", stream_format="sse"
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"} and len(kinds) > 1
    pcm = b"".join(base64.b64decode(event["audio"]) for event in events[:-1])
    assert len(pcm) / 2 / 24_000 == pytest.approx(pcm_seconds(node, SENTENCE), rel=0.02)
    assert events[-1]["usage"]["input_tokens"] == len(SENTENCE)


def test_a_wrong_key_is_the_clients_authentication_error(node: ServerProcess) -> None:
    wrong = openai.OpenAI(base_url=node.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        wrong.audio.speech.create(model="tts-1", voice=VOICE, input=SENTENCE)
    assert caught.value.code == "unauthorized"


def test_unknown_voice_and_model_are_not_found_with_useful_messages(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as voice:
        client.audio.speech.create(model="tts-1", voice="no_such_voice", input=SENTENCE)
    assert voice.value.code == "voice_not_found" and "no_such_voice" in voice.value.message
    with pytest.raises(openai.NotFoundError) as model:
        client.audio.speech.create(model="tts-9", voice=VOICE, input=SENTENCE)
    assert model.value.code == "model_not_found" and "tts-1" in model.value.message and "kokoro" in model.value.message
    with pytest.raises(openai.UnprocessableEntityError) as speed:
        client.audio.speech.create(model="tts-1", voice=VOICE, input=SENTENCE, speed=9)
    assert speed.value.body["param"] == "speed"  # type: ignore[index]


def test_speed_instructions_and_the_object_voice(client: openai.OpenAI, node: ServerProcess) -> None:
    normal = decoded_seconds(
        client.audio.speech.create(model="kokoro", voice=VOICE, input=SENTENCE, response_format="wav").content
    )
    fast = client.audio.speech.create(
        model="kokoro",
        voice={"id": VOICE},
        input=SENTENCE,
        response_format="wav",
        speed=2.0,
        instructions="Speak cheerfully.",
    )
    assert decoded_seconds(fast.content) < 0.7 * normal
    assert fast.response.headers["x-ignored-parameters"] == "instructions"


def test_models_and_voices_lists(client: openai.OpenAI, node: ServerProcess) -> None:
    ids = [model.id for model in client.models.list()]
    assert ids[:3] == ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"] and "kokoro" in ids
    voices = PROBE.get(node.url + "/v1/audio/voices", headers=KEYED).json()
    by_id = {voice["id"]: voice for voice in voices["data"]}
    assert by_id[VOICE]["kind"] == "builtin" and by_id[VOICE]["language"] == "en-us"
    assert by_id["alloy"]["kind"] == "openai" and by_id["alloy"]["maps_to"]


def test_openai_requests_share_the_lifecycle(client: openai.OpenAI, node: ServerProcess) -> None:
    client.audio.speech.create(model="tts-1", voice=VOICE, input="Counted once.", response_format="mp3")
    again = client.audio.speech.create(model="tts-1", voice=VOICE, input="Counted once.", response_format="opus")
    assert again.response.headers["x-cache"] == "hit"  # the cache keeps PCM: a hit serves any format
    metrics = PROBE.get(node.url + "/metrics").text
    assert 'polytts_requests_total{engine="kokoro",outcome="ok",route="v1/audio/speech"}' in metrics
    assert "v1/audio/speech outcome=ok" in node.log()


def test_the_sdk_sees_each_requests_id(client: openai.OpenAI, node: ServerProcess) -> None:
    """The SDK reads `x-request-id` (its `request_id`, and `_request_id` on parsed objects, which LiveKit logs):
    a new id per request, or the caller's own, which the node's log line carries too."""
    models = client.models.list()
    assert models._request_id and len(models._request_id) == 32
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice=VOICE, input="Who asked?", response_format="pcm", extra_headers={"X-Request-Id": "lk-1"}
    ) as response:
        assert response.request_id == "lk-1" and len(response.read()) > 0
    line = re.compile(r"v1/audio/speech outcome=ok .* id=lk-1$", re.MULTILINE)
    wait_until(lambda: line.search(node.log()), 10, "the request's log line", detail=node.log)
    with pytest.raises(openai.NotFoundError) as refused:
        client.audio.speech.create(model="tts-9", voice=VOICE, input=SENTENCE, extra_headers={"X-Request-Id": "lk-2"})
    assert refused.value.request_id == "lk-2"
    assert "v1/audio/speech outcome=model_not_found status=404 client=127.0.0.1 id=lk-2" in node.log()


def test_an_abandoned_stream_frees_the_gpu_thread(client: openai.OpenAI, node: ServerProcess) -> None:
    stop = threading.Event()

    def listen_briefly() -> None:
        with client.audio.speech.with_streaming_response.create(model="tts-1", voice=VOICE, input=LONG * 2) as response:
            next(response.iter_bytes())
        stop.set()

    listener = threading.Thread(target=listen_briefly)
    listener.start()
    listener.join(120)
    assert stop.is_set()

    def running() -> int:
        return int(PROBE.get(node.url + "/health", headers=KEYED).json()["inflight"]["running"])

    wait_until(lambda: not running(), 60, "the GPU thread to be free")
    assert running() == 0


def test_a_client_that_leaves_an_encoded_event_stream_leaves_the_node_up(node: ServerProcess) -> None:
    """The client goes away while the stream's encoder runs on a worker thread: closing the encoder waits for that
    step (FFmpeg crashed the process when the container was freed under a running AAC encode)."""
    body = {"model": "tts-1", "voice": "alloy", "input": LONG, "response_format": "aac", "stream_format": "sse"}
    for _ in range(4):
        with PROBE.stream("POST", node.url + "/v1/audio/speech", json=body, timeout=120, headers=KEYED) as response:
            assert response.status_code == 200
            next(response.iter_bytes())
    assert PROBE.get(node.url + "/health", timeout=10).json()["status"] == "ready"


def test_pipecat_openai_service_speaks_an_answer_sentence_by_sentence(node: ServerProcess) -> None:
    """Pipecat's OpenAITTSService, as an agent runs it: one request per sentence of the answer, raw PCM, which it
    takes to be at 24 kHz (no word timings: OpenAI's API has none)."""
    from pipecat.services.openai.tts import OpenAITTSService

    answer = "The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone was happy."
    logged = len(node.log())

    async def run() -> tuple[np.ndarray, list[TimedWord]]:
        service = OpenAITTSService(
            api_key="sk-good",
            base_url=node.url + "/v1",
            settings=OpenAITTSService.Settings(voice="alloy"),
            stop_frame_timeout_s=PIPECAT_PATIENCE_S,
        )
        return await pipecat_speak(service, answer, 24_000)

    samples, _ = asyncio.run(run())
    assert 4.0 < samples.size / 24_000 < 9.0 and speech(samples)
    assert samples.size / 24_000 == pytest.approx(pcm_seconds(node, answer), abs=0.5)
    assert node.log()[logged:].count("v1/audio/speech outcome=ok") == 2  # one request per sentence
