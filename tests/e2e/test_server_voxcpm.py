"""End to end over HTTP: VoxCPM2 voice cloning on a tiny random model, beside Kokoro in one-engine residency."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from tests.support.clips import assert_joined_length, wav_clip
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess

MAX_LEN = 16  # patches per generation (the random model never stops early): 16 x 7680 samples
GENERATION = MAX_LEN * 7680
SEVEN = "One sentence. Two sentences. Three here. Four now. Five again. Six more. Seven, the end."


@pytest.fixture(scope="module")
def vox_server(
    tmp_path_factory: pytest.TempPathFactory, tiny_voxcpm: Path, assembled_model: Path
) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("voxcpm"),
        POLYTTS_VOXCPM_MODEL=str(tiny_voxcpm),
        POLYTTS_VOXCPM_MAX_LEN=str(MAX_LEN),
        POLYTTS_KOKORO_BACKEND="onnx",
        # Generations as the caps cut them: a stream ahead of its listener would have its steps cut short after a
        # clause, as many times as the machine's speed allows (one thread: every sentence its own generation).
        POLYTTS_SHORT_STEP_S="0",
    ).start()
    yield server
    server.stop()


@pytest.fixture
def client(vox_server: ServerProcess) -> Iterator[httpx.Client]:
    with vox_server.client() as c:
        yield c


def register(client: httpx.Client, audio: bytes, **data: str) -> str:
    files = {"audio": ("ref.wav", audio)}
    if "seed_audio" in data:
        files["seed_audio"] = ("seed.wav", data.pop("seed_audio").encode("latin-1"))
    response = client.post("/voices", files=files, data={"engine": "voxcpm", **data})
    assert response.status_code == 201, response.text
    return str(response.json()["voice_id"])


@pytest.fixture(scope="module")
def voices(vox_server: ServerProcess) -> dict[str, str]:
    """One voice per prompt mode."""
    with vox_server.client() as client:
        return {
            "continuation": register(client, wav_clip(2.0, 150), ref_text="this is my voice"),
            "xvector": register(client, wav_clip(2.0, 160), x_vector_only_mode="true"),
            "seeded": register(
                client,
                wav_clip(2.0, 170),
                ref_text="my voice",
                seed_audio=wav_clip(1.0, 520).decode("latin-1"),
                seed_text="a calm tone",
            ),
        }


@pytest.mark.parametrize("mode", ["continuation", "xvector", "seeded"])
def test_each_prompt_mode_returns_a_48khz_wav(client: httpx.Client, voices: dict[str, str], mode: str) -> None:
    response = client.post("/tts", json={"text": "Hello from a cloned voice.", "voice_id": voices[mode]})
    assert response.status_code == 200, response.text
    assert response.headers["x-engine"] == "voxcpm" and response.headers["x-sample-rate"] == "48000"
    samples, rate = sf.read(io.BytesIO(response.content))
    assert rate == 48_000 and len(samples) == GENERATION


def test_stream_forwards_pieces_as_they_are_generated(client: httpx.Client, voices: dict[str, str]) -> None:
    started = time.perf_counter()
    arrivals: list[float] = []
    body = {"text": SEVEN, "voice_id": voices["continuation"], "max_sentences_per_gen": 2}
    with client.stream("POST", "/tts/stream", json=body) as response:
        assert response.status_code == 200 and response.headers["x-sample-rate"] == "48000"
        size = 0
        for chunk in response.iter_raw():
            arrivals.append(time.perf_counter() - started)
            size += len(chunk)
    assert_joined_length(size // 2, [GENERATION] * 4, 48_000)  # ceil(7 / 2) generations, s16le
    assert len(arrivals) >= 8
    assert arrivals[0] < 0.5 * arrivals[-1]


@pytest.mark.parametrize(
    ("caps", "generations"),
    [
        ({}, 3),
        ({"max_sentences_per_gen": 1}, 7),
        ({"max_sentences_per_gen": 0, "max_chars_per_gen": 0}, 2),
        ({"max_sentences_per_gen": 0, "max_chars_per_gen": 30}, 4),
    ],
)
def test_generation_caps_split_long_text(
    client: httpx.Client, voices: dict[str, str], caps: dict[str, int], generations: int
) -> None:
    # Defaults: 80 characters and 3 sentences per generation. The first sentence is always a generation of its own.
    response = client.post("/tts", json={"text": SEVEN, "voice_id": voices["xvector"], **caps})
    assert response.status_code == 200, response.text
    assert_joined_length(len(sf.read(io.BytesIO(response.content))[0]), [GENERATION] * generations, 48_000)


def test_registrations_that_lack_a_transcript_are_refused(client: httpx.Client) -> None:
    no_text = client.post("/voices", files={"audio": ("a.wav", wav_clip(1.0, 610))}, data={"engine": "voxcpm"})
    assert no_text.status_code == 422 and no_text.json()["code"] == "ref_text_required"
    seed_without_text = client.post(
        "/voices",
        files={"audio": ("a.wav", wav_clip(1.0, 620)), "seed_audio": ("s.wav", wav_clip(1.0, 630))},
        data={"engine": "voxcpm", "ref_text": "hi"},
    )
    assert seed_without_text.status_code == 422 and seed_without_text.json()["code"] == "seed_text_required"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"cfg_value": 0.1}, "invalid_input"),
        ({"cfg_value": 11}, "invalid_input"),
        ({"inference_timesteps": 0}, "invalid_input"),
        ({"inference_timesteps": 101}, "invalid_input"),
        ({"max_chars_per_gen": -1}, "invalid_input"),
        ({"speed": 1.2}, "unsupported_parameter"),
        ({"denoise": True}, "denoiser_unavailable"),
    ],
)
def test_parameter_bounds(client: httpx.Client, voices: dict[str, str], body: dict[str, object], code: str) -> None:
    response = client.post("/tts/stream", json={"text": "hi", "voice_id": voices["continuation"], **body})
    assert response.status_code == 422 and response.json()["code"] == code, response.text


def test_voxcpm_parameters_do_not_apply_to_kokoro(client: httpx.Client) -> None:
    response = client.post("/tts", json={"text": "hi", "voice_id": "af_heart", "cfg_value": 2.0})
    assert response.status_code == 422 and response.json()["code"] == "unsupported_parameter"


def test_kokoro_and_voxcpm_evict_each_other(client: httpx.Client, voices: dict[str, str]) -> None:
    def resident() -> list[str]:
        return [r["engine"] for r in client.get("/health").json()["resident"]]

    assert client.post("/tts", json={"text": "Kokoro first.", "language": "en"}).status_code == 200
    assert resident() == ["kokoro"]
    assert client.post("/tts", json={"text": "Now cloned.", "voice_id": voices["continuation"]}).status_code == 200
    health = client.get("/health").json()
    assert resident() == ["voxcpm"]
    assert health["resident"][0]["checkpoint"].startswith("voxcpm:")
    assert health["engines"]["voxcpm"]["state"] == "ready"
    evictions = health["manager"]["units"]["kokoro"]["evictions"]
    assert client.post("/tts", json={"text": "Kokoro again.", "language": "en"}).status_code == 200
    health = client.get("/health").json()
    assert resident() == ["kokoro"]
    assert health["manager"]["units"]["voxcpm"]["evictions"] >= 1
    assert health["manager"]["units"]["kokoro"]["evictions"] == evictions
    assert health["manager"]["units"]["kokoro"]["loads"] >= 2


def test_idle_timer_unloads_voxcpm(tmp_path: Path, tiny_voxcpm: Path, assembled_model: Path) -> None:
    server = ServerProcess(
        tmp_path,
        POLYTTS_VOXCPM_MODEL=str(tiny_voxcpm),
        POLYTTS_VOXCPM_MAX_LEN=str(MAX_LEN),
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_WARM_ON_START="false",
        POLYTTS_IDLE_EVICT_SECONDS="1",
    ).start()
    try:
        with server.client() as client:
            voice = register(client, wav_clip(1.0, 700), ref_text="idle voice")
            assert client.post("/tts", json={"text": "Load it.", "voice_id": voice}).status_code == 200
            wait_until(lambda: not client.get("/health").json()["resident"], 20, "the idle engine to be unloaded")
            health = client.get("/health").json()
            assert health["resident"] == [] and health["manager"]["units"]["voxcpm"]["evictions"] == 1
            assert health["engines"]["voxcpm"]["memory"] == {"weights_bytes": 0}
    finally:
        server.stop()
