"""End to end over HTTP: Qwen3-TTS on PyTorch on a tiny random checkpoint, beside Kokoro and VoxCPM2 in one-engine
residency."""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import soundfile as sf

from tests.e2e.test_server_mlx import CLIP
from tests.support.clips import assert_joined_length, wav_clip
from tests.support.servers import ServerProcess
from tests.support.voices import register_clip
from voicebank.ids import compute_voice_id

FRAMES = 11  # POLYTTS_QWEN_MAX_TOKENS 12: the random model never stops, the first step only prefills
GENERATION = FRAMES * 1920  # samples at 24 kHz


def qwen_server(tmp: Path, tiny_qwen_torch: Path, tiny_voxcpm: Path, **env: str) -> ServerProcess:
    return ServerProcess(
        tmp,
        POLYTTS_QWEN_MODEL=str(tiny_qwen_torch),
        POLYTTS_QWEN_MAX_TOKENS="12",
        POLYTTS_STREAM_INTERVAL="0.25",
        POLYTTS_VOXCPM_MODEL=str(tiny_voxcpm),
        POLYTTS_VOXCPM_MAX_LEN="4",
        POLYTTS_KOKORO_BACKEND="onnx",
        OMP_NUM_THREADS="1",  # tiny models on a shared CPU
        **env,
    )


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, tiny_qwen_torch: Path, tiny_voxcpm: Path, assembled_model: Path
) -> Iterator[ServerProcess]:
    server = qwen_server(tmp_path_factory.mktemp("qwen"), tiny_qwen_torch, tiny_voxcpm).start(timeout=120)
    yield server
    server.stop()


@pytest.fixture
def client(node: ServerProcess) -> Iterator[httpx.Client]:
    with node.client() as c:
        yield c


@pytest.fixture(scope="module")
def voices(node: ServerProcess) -> dict[str, str]:
    with node.client() as client:
        return {
            "in_context": register_clip(client, "qwen", CLIP, ref_text="hello there"),
            "xvector": register_clip(client, "qwen", wav_clip(1.0, 360), x_vector_only_mode="true"),
        }


def test_registrations_give_the_ids_every_node_gives(client: httpx.Client, voices: dict[str, str]) -> None:
    # The same registration as on the MLX node (tests/e2e/test_server_mlx.py): the same id.
    assert voices["in_context"] == compute_voice_id(CLIP, "qwen")
    assert voices["xvector"] == compute_voice_id(wav_clip(1.0, 360), "qwen", x_vector_only_mode=True)
    health = client.get("/health").json()
    assert "qwen" in health["serves"] and health["engines"]["qwen"]["backend"] == "torch"


def test_a_tone_seed_is_refused_for_qwen(client: httpx.Client, node: ServerProcess) -> None:
    before = sorted(p.name for p in (node.tmp / "voices").iterdir())
    response = client.post(
        "/voices",
        files={"audio": ("a.wav", wav_clip(1.0, 370)), "seed_audio": ("s.wav", wav_clip(1.0, 380))},
        data={"engine": "qwen", "ref_text": "hi", "seed_text": "calm"},
    )
    assert response.status_code == 422 and response.json()["code"] == "seed_not_supported", response.text
    assert "qwen" in response.json()["message"]
    assert sorted(p.name for p in (node.tmp / "voices").iterdir()) == before


@pytest.mark.parametrize("mode", ["in_context", "xvector"])
def test_each_voice_mode_returns_a_24khz_wav(client: httpx.Client, voices: dict[str, str], mode: str) -> None:
    response = client.post("/tts", json={"text": "Hello from a cloned voice.", "voice_id": voices[mode]})
    assert response.status_code == 200, response.text
    assert response.headers["x-engine"] == "qwen" and response.headers["x-sample-rate"] == "24000"
    samples, rate = sf.read(io.BytesIO(response.content))
    assert rate == 24_000 and len(samples) == GENERATION


def test_stream_hands_out_pieces_as_they_are_generated(client: httpx.Client, voices: dict[str, str]) -> None:
    started = time.perf_counter()
    arrivals: list[float] = []
    size = 0
    body = {"text": "First sentence here. Second one now.", "voice_id": voices["xvector"], "max_sentences_per_gen": 1}
    with client.stream("POST", "/tts/stream", json=body) as response:
        assert response.status_code == 200 and response.headers["x-sample-rate"] == "24000"
        for chunk in response.iter_raw():
            arrivals.append(time.perf_counter() - started)
            size += len(chunk)
    assert_joined_length(size // 2, [GENERATION] * 2, 24_000)  # two generations, s16le
    assert len(arrivals) >= 8  # 0.25 s pieces: 3 + 3 + 3 + 2 frames each
    assert arrivals[0] < 0.5 * arrivals[-1]


def test_sampling_parameters_are_taken(client: httpx.Client, voices: dict[str, str]) -> None:
    body = {
        "text": "Tuned.",
        "voice_id": voices["in_context"],
        "language": "zh",
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
        "subtalker_temperature": 0.6,
        "subtalker_top_k": 10,
        "subtalker_top_p": 0.8,
        "max_new_tokens": 6,
        "non_streaming_mode": True,
    }
    response = client.post("/tts", json=body)
    assert response.status_code == 200, response.text
    assert len(sf.read(io.BytesIO(response.content))[0]) == 5 * 1920


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"temperature": 0}, "invalid_input"),
        ({"temperature": 2.5}, "invalid_input"),
        ({"top_k": 0}, "invalid_input"),
        ({"top_p": 1.5}, "invalid_input"),
        ({"repetition_penalty": 3}, "invalid_input"),
        ({"subtalker_top_p": 0}, "invalid_input"),
        ({"max_new_tokens": 1}, "invalid_input"),
        ({"max_new_tokens": 13}, "max_new_tokens_too_large"),
        ({"cfg_value": 2.0}, "unsupported_parameter"),
        ({"speed": 1.1}, "unsupported_parameter"),
        ({"language": "hi"}, "unsupported_language"),
    ],
)
def test_parameter_checks(client: httpx.Client, voices: dict[str, str], body: dict[str, object], code: str) -> None:
    response = client.post("/tts/stream", json={"text": "hi", "voice_id": voices["in_context"], **body})
    assert response.status_code == 422 and response.json()["code"] == code, response.text


@pytest.mark.parametrize("voice", ["af_heart", "voxcpm"])
def test_qwen_parameters_do_not_apply_to_other_engines(client: httpx.Client, voice: str) -> None:
    voice_id = voice
    if voice == "voxcpm":
        created = client.post(
            "/voices", files={"audio": ("a.wav", wav_clip(1.0, 390))}, data={"engine": "voxcpm", "ref_text": "hi"}
        )
        voice_id = created.json()["voice_id"]
    for param in ({"temperature": 0.8}, {"max_new_tokens": 8}, {"non_streaming_mode": False}):
        response = client.post("/tts", json={"text": "hi", "voice_id": voice_id, **param})
        assert response.status_code == 422 and response.json()["code"] == "unsupported_parameter", response.text


def test_qwen_evicts_and_is_evicted_by_kokoro_and_voxcpm(client: httpx.Client, voices: dict[str, str]) -> None:
    voxcpm = client.post(
        "/voices", files={"audio": ("a.wav", wav_clip(1.0, 400))}, data={"engine": "voxcpm", "ref_text": "swap"}
    ).json()["voice_id"]
    turns = (
        (None, "kokoro"),
        (voices["in_context"], "qwen"),
        (voxcpm, "voxcpm"),
        (voices["xvector"], "qwen"),
        (None, "kokoro"),
    )
    before = client.get("/health").json()["manager"]["units"]["qwen"]
    for turn, (voice_id, engine) in enumerate(turns):
        body = {"text": f"Swap number {turn}.", "language": "en"} | ({"voice_id": voice_id} if voice_id else {})
        assert client.post("/tts", json=body).status_code == 200  # a new text each time: no cached answer
        health = client.get("/health").json()
        assert [r["engine"] for r in health["resident"]] == [engine]
        if engine == "qwen":
            assert health["resident"][0]["checkpoint"].startswith("qwen:")
            memory = health["engines"]["qwen"]["memory"]["weights_bytes"]
            assert memory > 1_000_000 and health["manager"]["units"]["qwen"]["footprint"] == memory
    after = health["manager"]["units"]["qwen"]
    assert after["loads"] - before["loads"] == 2 and after["evictions"] == after["loads"]
    assert health["engines"]["qwen"]["memory"] == {"weights_bytes": 0} and health["engines"]["qwen"]["loaded"] is False


def test_a_restart_reuses_prepared_voices(
    client: httpx.Client,
    node: ServerProcess,
    voices: dict[str, str],
    tmp_path: Path,
    tiny_qwen_torch: Path,
    tiny_voxcpm: Path,
) -> None:
    voice_id = voices["in_context"]
    assert client.post("/tts", json={"text": "Prepare it.", "voice_id": voice_id}).status_code == 200
    shutil.copytree(node.tmp / "voices", tmp_path / "voices")  # what a restarted node finds on disk
    artefacts = sorted((tmp_path / "voices" / voice_id / "prompts").glob("*/*.npy"))
    assert [p.name for p in artefacts] == ["ref_codes.npy", "speaker.npy"]
    written = [p.stat().st_mtime_ns for p in artefacts]
    restarted = qwen_server(tmp_path, tiny_qwen_torch, tiny_voxcpm, POLYTTS_WARM_ON_START="false").start(timeout=120)
    try:
        with restarted.client() as again:
            response = again.post("/tts", json={"text": "From disk.", "voice_id": voice_id})
            assert response.status_code == 200 and len(sf.read(io.BytesIO(response.content))[0]) == GENERATION
    finally:
        restarted.stop()
    assert [p.stat().st_mtime_ns for p in artefacts] == written
