"""End to end over HTTP: CosyVoice 2 on PyTorch on a tiny random checkpoint, beside Kokoro in one-engine residency,
served by `/tts`, `/tts/stream`, the OpenAI route (its `instructions`, through the official client) and the live
WebSocket; a node without CosyVoice keeps its voices' ids and refuses them."""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import soundfile as sf

from tests.support.clips import assert_joined_length, wav_clip
from tests.support.live_socket import speak_live
from tests.support.servers import ServerProcess
from tests.support.tiny_cosyvoice import LENGTH_RATIO, SAMPLES_PER_TOKEN
from tests.support.voices import register_clip
from voicebank.ids import compute_voice_id

STYLE = "用开心的语气说"


def samples(text: str) -> int:
    """The audio of one generation of `text`: the tiny model speaks every text token (byte) for LENGTH_RATIO tokens."""
    return len(text.encode()) * LENGTH_RATIO * SAMPLES_PER_TOKEN


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, tiny_cosyvoice: Path, assembled_model: Path
) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("cosyvoice"),
        POLYTTS_COSYVOICE_MODEL=str(tiny_cosyvoice),
        POLYTTS_KOKORO_BACKEND="onnx",
        OMP_NUM_THREADS="1",  # tiny models on a shared CPU
    ).start(timeout=120)
    yield server
    server.stop()


@pytest.fixture
def client(node: ServerProcess) -> Iterator[httpx.Client]:
    with node.client() as c:
        yield c


CLIPS = {"transcript": wav_clip(1.0, 170), "no_transcript": wav_clip(1.0, 180), "xvector": wav_clip(1.0, 190)}


@pytest.fixture(scope="module")
def voices(node: ServerProcess) -> dict[str, str]:
    with node.client() as client:
        return {
            "transcript": register_clip(client, "cosyvoice", CLIPS["transcript"], ref_text="this is my voice"),
            "no_transcript": register_clip(client, "cosyvoice", CLIPS["no_transcript"]),
            "xvector": register_clip(client, "cosyvoice", CLIPS["xvector"], x_vector_only_mode="true"),
        }


def test_registrations_give_the_ids_every_node_gives(
    client: httpx.Client, voices: dict[str, str], tiny_cosyvoice: Path
) -> None:
    assert voices["transcript"] == compute_voice_id(CLIPS["transcript"], "cosyvoice")
    assert voices["no_transcript"] == compute_voice_id(CLIPS["no_transcript"], "cosyvoice")
    assert voices["xvector"] == compute_voice_id(CLIPS["xvector"], "cosyvoice", x_vector_only_mode=True)
    health = client.get("/health").json()
    assert "cosyvoice" in health["serves"]
    described = health["engines"]["cosyvoice"]
    assert described["backend"] == "torch" and described["model"] == str(tiny_cosyvoice)  # POLYTTS_COSYVOICE_MODEL
    seeded = client.post(
        "/voices",
        files={"audio": ("a.wav", wav_clip(1.0, 200)), "seed_audio": ("s.wav", wav_clip(1.0, 210))},
        data={"engine": "cosyvoice", "ref_text": "hi", "seed_text": "calm"},
    )
    assert seeded.status_code == 422 and seeded.json()["code"] == "seed_not_supported", seeded.text


@pytest.mark.parametrize("mode", ["transcript", "no_transcript", "xvector"])
def test_each_voice_mode_returns_a_24khz_wav(
    client: httpx.Client, voices: dict[str, str], mode: str, tiny_cosyvoice: Path
) -> None:
    response = client.post("/tts", json={"text": "Hi.", "voice_id": voices[mode]})
    assert response.status_code == 200, response.text
    assert response.headers["x-engine"] == "cosyvoice" and response.headers["x-sample-rate"] == "24000"
    audio, rate = sf.read(io.BytesIO(response.content))
    assert rate == 24_000 and len(audio) == samples("Hi.")
    health = client.get("/health").json()
    assert health["resident"] == [{"engine": "cosyvoice", "checkpoint": health["engines"]["cosyvoice"]["checkpoint"]}]
    assert health["engines"]["cosyvoice"]["checkpoint"].startswith(f"cosyvoice:{tiny_cosyvoice}@")
    weights = health["engines"]["cosyvoice"]["memory"]["weights_bytes"]
    assert weights > 10_000_000 and health["manager"]["units"]["cosyvoice"]["footprint"] == weights


def test_stream_hands_out_pieces_as_they_are_generated(client: httpx.Client, voices: dict[str, str]) -> None:
    started = time.perf_counter()
    arrivals: list[float] = []
    size = 0
    body = {"text": "Hello. Hi.", "voice_id": voices["transcript"], "max_sentences_per_gen": 1}
    with client.stream("POST", "/tts/stream", json=body) as response:
        assert response.status_code == 200 and response.headers["x-sample-rate"] == "24000"
        for chunk in response.iter_raw():
            arrivals.append(time.perf_counter() - started)
            size += len(chunk)
    assert_joined_length(size // 2, [samples("Hello."), samples("Hi.")], 24_000)  # s16le
    assert len(arrivals) >= 6  # 5 pieces of the first generation, 3 of the second
    assert arrivals[0] < 0.5 * arrivals[-1]


def test_instruct_cross_lingual_and_sampling_are_taken(client: httpx.Client, voices: dict[str, str]) -> None:
    for params in (
        {"instruct": STYLE},
        {"cross_lingual": True, "language": "zh"},
        {"top_p": 0.5, "top_k": 5, "repetition_window": 5, "repetition_ratio": 0.4, "normalize": False},
    ):
        text = "好" if params.get("language") == "zh" else "Hi."
        response = client.post("/tts", json={"text": text, "voice_id": voices["transcript"], **params})
        assert response.status_code == 200, response.text
        assert len(sf.read(io.BytesIO(response.content))[0]) == samples(text)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"top_p": 0}, "invalid_input"),
        ({"top_p": 1.5}, "invalid_input"),
        ({"top_k": 0}, "invalid_input"),
        ({"repetition_window": 101}, "invalid_input"),
        ({"repetition_ratio": 0}, "invalid_input"),
        ({"repetition_ratio": True}, "invalid_input"),
        ({"instruct": "x" * 4097}, "invalid_input"),
        ({"cross_lingual": "perhaps"}, "invalid_input"),
        ({"cfg_value": 2.0}, "unsupported_parameter"),
        ({"temperature": 0.8}, "unsupported_parameter"),
        ({"language": "fr"}, "unsupported_language"),
    ],
)
def test_parameter_checks(client: httpx.Client, voices: dict[str, str], body: dict[str, object], code: str) -> None:
    response = client.post("/tts/stream", json={"text": "hi", "voice_id": voices["transcript"], **body})
    assert response.status_code == 422 and response.json()["code"] == code, response.text


def test_an_instruction_does_not_apply_to_other_engines(client: httpx.Client) -> None:
    response = client.post("/tts", json={"text": "hi", "voice_id": "af_heart", "instruct": STYLE})
    assert response.status_code == 422 and response.json()["code"] == "unsupported_parameter", response.text
    assert "instruct" in response.json()["message"]


def test_the_openai_route_speaks_by_its_instructions(node: ServerProcess, voices: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=node.url + "/v1", api_key="unused", max_retries=0, timeout=120)

    def speech(voice: str, model: str = "cosyvoice", **extra: Any) -> Any:
        return client.audio.speech.create(model=model, voice=voice, input="Yo.", response_format="wav", **extra)

    styled = speech(voices["transcript"], instructions=STYLE)
    assert "x-ignored-parameters" not in styled.response.headers
    assert styled.response.headers["x-engine"] == "cosyvoice" and styled.response.headers["x-cache"] == "miss"
    assert len(sf.read(io.BytesIO(styled.content))[0]) == samples("Yo.")
    # The instruction is part of what was generated: the same request is cached, one without it is not.
    assert speech(voices["transcript"], instructions=STYLE).response.headers["x-cache"] == "hit"
    assert speech(voices["transcript"]).response.headers["x-cache"] == "miss"
    kokoro = speech("af_heart", model="kokoro", instructions=STYLE)
    assert kokoro.response.headers["x-ignored-parameters"] == "instructions"


async def test_the_live_websocket_speaks_a_cosyvoice_voice(node: ServerProcess, voices: dict[str, str]) -> None:
    url = node.url.replace("http", "ws") + f"/tts/live/ws?voice={voices['xvector']}"
    live = await speak_live(url, ["Hi. "])
    assert live.kinds[0] == "start" and live.kinds[-1] == "done", live.events
    assert len(live.audio) == 2 * samples("Hi.")


def test_a_node_without_cosyvoice_keeps_the_id_refuses_the_voice_and_its_folder_serves_elsewhere(
    server: ServerProcess, node: ServerProcess
) -> None:
    clip = wav_clip(1.0, 460)
    with server.client() as plain:
        assert "cosyvoice" not in plain.get("/health").json()["serves"]
        created = plain.post("/voices", files={"audio": ("a.wav", clip)}, data={"engine": "cosyvoice"})
        assert created.status_code == 201, created.text
        voice_id = created.json()["voice_id"]
        assert voice_id == compute_voice_id(clip, "cosyvoice")
        refused = plain.post("/tts", json={"text": "Not here.", "voice_id": voice_id})
        assert refused.status_code == 422 and refused.json()["code"] == "engine_unavailable", refused.text
    shutil.copytree(server.tmp / "voices" / voice_id, node.tmp / "voices" / voice_id)
    with node.client() as capable:
        served = capable.post("/tts", json={"text": "Hi.", "voice_id": voice_id})
        assert served.status_code == 200, served.text
        assert len(sf.read(io.BytesIO(served.content))[0]) == samples("Hi.")
