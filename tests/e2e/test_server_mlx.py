"""End to end over HTTP on the MLX runtime (mlx's CPU backend here): same routes, registry and voice ids."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.clips import wav_clip
from tests.support.servers import ServerProcess
from voicebank.ids import compute_voice_id

CLIP = wav_clip(1.0, 345)


def mlx_server(tmp: Path, models: dict[str, Path], **env: str) -> ServerProcess:
    return ServerProcess(
        tmp,
        POLYTTS_RUNTIME="mlx",
        POLYTTS_MLX_KOKORO_MODEL=str(models["kokoro"]),
        POLYTTS_MLX_VOXCPM_MODEL=str(models["voxcpm"]),
        POLYTTS_MLX_QWEN_MODEL=str(models["qwen"]),
        POLYTTS_DEFAULT_VOICE="af_tiny",
        POLYTTS_VOXCPM_MAX_LEN="8",
        POLYTTS_QWEN_MAX_TOKENS="8",
        POLYTTS_STREAM_INTERVAL="0.32",
        **env,
    )


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mlx-node")


@pytest.fixture(scope="module")
def node(shared: Path, tiny_mlx_models: dict[str, Path]) -> Iterator[ServerProcess]:
    server = mlx_server(shared, tiny_mlx_models).start(timeout=180)
    yield server
    server.stop()


def test_health_names_the_runtime_and_what_the_node_serves(node: ServerProcess) -> None:
    with node.client() as client:
        health = client.get("/health").json()
        assert health["status"] == "ready" and health["runtime"] == "mlx"
        assert health["serves"] == ["kokoro", "qwen", "voxcpm"]
        assert health["engines"]["kokoro"]["backend"] == "mlx"
        assert set(health["engines"]["kokoro"]["memory"]) == {"active", "peak", "cache"}


def test_qwen_voice_streams_and_every_mlx_call_ran_on_the_gpu_thread(node: ServerProcess) -> None:
    with node.client() as client:
        created = client.post(
            "/voices", files={"audio": ("ref.wav", CLIP)}, data={"engine": "qwen", "ref_text": "hello there"}
        )
        assert created.status_code == 201, created.text
        voice_id = created.json()["voice_id"]
        assert voice_id == compute_voice_id(CLIP, "qwen")  # the same id a PyTorch node gives
        with client.stream("POST", "/tts/stream", json={"text": "Hello from a Mac.", "voice_id": voice_id}) as response:
            assert response.status_code == 200 and response.headers["x-sample-rate"] == "24000"
            chunks = [len(chunk) for chunk in response.iter_raw()]
        assert sum(chunks) == 2 * 7680 * 2
        health = client.get("/health").json()
        for engine in ("kokoro", "qwen"):
            assert health["engines"][engine]["mlx_threads"] == ["polytts-gpu"], engine
        assert health["resident"][0]["engine"] == "qwen"
        assert health["engines"]["qwen"]["memory"]["cache"] == 0  # cleared after the request


def test_voxcpm_voice_on_mlx(node: ServerProcess) -> None:
    with node.client() as client:
        voice_id = client.post(
            "/voices", files={"audio": ("ref.wav", wav_clip(1.5, 456))}, data={"engine": "voxcpm", "ref_text": "hi"}
        ).json()["voice_id"]
        response = client.post("/tts", json={"text": "Hello.", "voice_id": voice_id})
        assert response.status_code == 200 and response.headers["x-sample-rate"] == "48000"
        refused = client.post("/tts", json={"text": "Hello.", "voice_id": voice_id, "normalize": True})
        assert refused.status_code == 422 and refused.json()["code"] == "unsupported_parameter"


def test_restart_reuses_prepared_voices_from_disk(
    node: ServerProcess, shared: Path, tiny_mlx_models: dict[str, Path]
) -> None:
    with node.client() as client:
        voice_id = client.post(
            "/voices", files={"audio": ("ref.wav", wav_clip(1.0, 777))}, data={"engine": "qwen", "ref_text": "again"}
        ).json()["voice_id"]
        assert client.post("/tts", json={"text": "First.", "voice_id": voice_id}).status_code == 200
    artefacts = sorted((shared / "voices" / voice_id / "prompts").glob("*/*.npy"))
    assert [p.name for p in artefacts] == ["ref_codes.npy", "reference.npy"]
    written = [p.stat().st_mtime_ns for p in artefacts]
    node.stop()
    node.start(timeout=180)
    with node.client() as client:
        assert client.post("/tts", json={"text": "Second.", "voice_id": voice_id}).status_code == 200
    assert [p.stat().st_mtime_ns for p in artefacts] == written
