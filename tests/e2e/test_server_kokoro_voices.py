"""End to end over HTTP: Kokoro on PyTorch (a small random model) and on ONNX, blends and uploaded voice packs."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.servers import ROOT, ServerProcess
from tests.support.voices import npy

PACK = np.random.default_rng(7).standard_normal((510, 1, 256)).astype(np.float32) * 0.1


def upload_pack(client: httpx.Client, data: bytes, filename: str = "pack.npy") -> httpx.Response:
    return client.post("/voices", files={"voice_pack": (filename, data)}, data={"engine": "kokoro"})


def stream_pcm(client: httpx.Client, voice: str, text: str = "Hello there.") -> np.ndarray:
    response = client.post("/tts/stream", json={"text": text, "voice_id": voice, "language": "en"})
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, "<i2")


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One voices folder that both backends' servers use in turn."""
    return tmp_path_factory.mktemp("kokoro-voices")


@pytest.fixture(scope="module")
def torch_server(shared_dir: Path, tiny_kokoro: Path, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        shared_dir,
        POLYTTS_KOKORO_BACKEND="torch",
        POLYTTS_KOKORO_MODEL=str(tiny_kokoro),
        POLYTTS_DEFAULT_VOICE="af_tiny",
    ).start(timeout=120)
    yield server
    server.stop()


def test_torch_backend_is_reported_with_its_checkpoint(torch_server: ServerProcess, tiny_kokoro: Path) -> None:
    with torch_server.client() as client:
        health = client.get("/health").json()
        kokoro = health["engines"]["kokoro"]
        assert health["status"] == "ready"
        assert kokoro["backend"] == "torch" and kokoro["device"] == "cpu"
        assert kokoro["checkpoint"].startswith(f"kokoro-torch:{tiny_kokoro}@")
        assert health["resident"] == [{"engine": "kokoro", "checkpoint": kokoro["checkpoint"]}]
        assert kokoro["g2p"]["english"] == "espeak"
        builtin = {v["voice_id"]: v["language"] for v in client.get("/voices").json()["voices"] if v["builtin"]}
        assert {name: builtin[name] for name in ("af_tiny", "am_tiny", "bf_tiny")} == {
            "af_tiny": "en-us",
            "am_tiny": "en-us",
            "bf_tiny": "en-gb",
        }
        assert builtin["af_heart"] == "en-us" and len(builtin) == 54 + 3  # the stock voices, without the hub


def test_a_blend_streams_audio(torch_server: ServerProcess) -> None:
    with torch_server.client() as client:
        pcm = stream_pcm(client, "af_tiny(2) + am_tiny(1)")
        assert len(pcm) > 2400 and np.abs(pcm).max() > 0


@pytest.mark.parametrize(
    ("voice", "part"),
    [
        ("af_tiny(2)+nobody(1)", "nobody"),
        ("af_tiny(x)+am_tiny", "af_tiny(x)"),
        ("af_tiny++am_tiny", ""),
        ("af_tiny(0)+am_tiny(1)", "af_tiny(0)"),
        ("af_tiny+af_tiny", "af_tiny"),
    ],
)
def test_a_bad_blend_points_at_its_part(torch_server: ServerProcess, voice: str, part: str) -> None:
    with torch_server.client() as client:
        response = client.post("/tts/stream", json={"text": "hi", "voice_id": voice})
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["code"] == "invalid_blend" and body["detail"]["part"] == part


def test_uploaded_pack_is_content_hashed_and_streams(torch_server: ServerProcess) -> None:
    from engines.kokoro.voicepacks import pack_id

    with torch_server.client() as client:
        created = upload_pack(client, npy(PACK))
        assert created.status_code == 201, created.text
        voice_id = created.json()["voice_id"]
        assert voice_id == pack_id(PACK)
        import torch

        buffer = io.BytesIO()
        torch.save(torch.from_numpy(PACK), buffer)
        again = upload_pack(client, buffer.getvalue(), "same.pt")
        assert again.status_code == 200 and again.json() == {"voice_id": voice_id, "created": False}
        assert client.get(f"/voices/{voice_id}").json()["kind"] == "pack"
        assert len(stream_pcm(client, voice_id)) > 2400
        assert len(stream_pcm(client, f"{voice_id}(1)+af_tiny(1)")) > 2400  # packs blend with built-ins


def test_pack_refusals_over_http(torch_server: ServerProcess, tmp_path: Path) -> None:
    bad_values = PACK.copy()
    bad_values[3, 0, 5] = np.nan
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str, str]]:
            return (open, (str(marker), "w"))

    import torch

    pickled = io.BytesIO()
    torch.save(Payload(), pickled)
    cases = [
        (npy(bad_values), "v.npy", "pack_values"),
        (npy(PACK[:, :, :128]), "v.npy", "pack_shape"),
        (npy(PACK.astype(np.int32)), "v.npy", "pack_dtype"),
        (pickled.getvalue(), "v.pt", "pack_unsafe"),
        (b"whatever", "v.bin", "pack_format"),
    ]
    with torch_server.client() as client:
        before = client.get("/health").json()["voices"]["registered"]
        for data, name, code in cases:
            response = upload_pack(client, data, name)
            assert response.status_code == 422 and response.json()["code"] == code, (name, response.text)
        assert client.get("/health").json()["voices"]["registered"] == before
        clip_for_kokoro = client.post("/voices", files={"audio": ("a.wav", b"RIFF")}, data={"engine": "kokoro"})
        assert clip_for_kokoro.json()["code"] == "engine_cannot_clone"
        assert "voice_pack" in clip_for_kokoro.json()["message"]
    assert not marker.exists()


def test_unload_releases_the_weights(torch_server: ServerProcess) -> None:
    with torch_server.client() as client:
        stream_pcm(client, "af_tiny", "Loaded.")
        assert client.get("/health").json()["engines"]["kokoro"]["memory"]["weights_bytes"] > 100_000_000
        assert client.post("/model/unload").json() == {"unloaded": ["kokoro"]}
        health = client.get("/health").json()
        assert health["engines"]["kokoro"]["memory"] == {"weights_bytes": 0} and health["resident"] == []
        assert len(stream_pcm(client, "bf_tiny", "Back.")) > 0


def test_switching_backend_keeps_voice_ids(torch_server: ServerProcess, shared_dir: Path, tmp_path: Path) -> None:
    """The same voices folder served by the ONNX backend (beside the PyTorch node, as nodes share one): uploaded packs
    keep their ids and speak."""
    with torch_server.client() as client:
        voice_id = upload_pack(client, npy(PACK * 0.5)).json()["voice_id"]
    onnx = ServerProcess(tmp_path, POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_VOICES_DIR=str(shared_dir / "voices")).start()
    try:
        with onnx.client() as client:
            assert client.get("/health").json()["engines"]["kokoro"]["backend"] == "onnx"
            listed = {v["voice_id"] for v in client.get("/voices").json()["voices"]}
            assert {voice_id, "jf_alpha"} <= listed
            assert len(stream_pcm(client, voice_id)) > 2400
            assert len(stream_pcm(client, f"jf_alpha(3)+{voice_id}(1)")) > 2400
    finally:
        onnx.stop()


def test_offline_hub_is_a_clear_failed_state(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="torch",
        POLYTTS_KOKORO_MODEL="hexgrad/Kokoro-82M",
        HF_HOME=str(tmp_path / "empty-hub-cache"),
        HF_HUB_OFFLINE="1",
    ).start(timeout=120)
    try:
        with server.client() as client:
            health = client.get("/health").json()
            assert health["status"] == "failed"
            assert "offline" in health["reason"] and "POLYTTS_KOKORO_MODEL" in health["reason"]
            response = client.post("/tts", json={"text": "hello", "voice_id": "af_heart"})
            assert response.status_code == 503 and response.json()["code"] == "engine_failed"
    finally:
        server.stop()


def test_a_demanded_gpu_that_torch_cannot_see_refuses_to_start(tmp_path: Path) -> None:
    env = {**ServerProcess(tmp_path).env, "POLYTTS_RUNTIME": "cuda"}
    refused = subprocess.run(
        [sys.executable, "server.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 3
    assert "POLYTTS_RUNTIME=cuda" in refused.stderr and "POLYTTS_ALLOW_CPU" in refused.stderr
    allowed = ServerProcess(tmp_path, POLYTTS_RUNTIME="cuda", POLYTTS_ALLOW_CPU="1").start()
    try:
        with allowed.client() as client:
            assert client.get("/health").json()["status"] == "ready"
    finally:
        allowed.stop()


# A stock voice per language, with numbers or money as that language writes them.
SENTENCES = {
    "af_heart": ("en-us", "It costs $12.50."),
    "bf_emma": ("en-gb", "It costs £23.40."),
    "ef_dora": ("es", "Cuesta 12,50 €."),
    "ff_siwis": ("fr-fr", "Il coûte 12,50 €."),
    "hf_alpha": ("hi", "इसकी कीमत ₹250 है।"),
    "if_sara": ("it", "Costa 12,50 €."),
    "pf_dora": ("pt-br", "Custa R$ 12,50."),
    "jf_alpha": ("ja", "入場料は1,500円です。"),
    "zf_xiaobei": ("zh", "门票是50元。"),
}


def test_every_stock_language_speaks_on_the_default_stack(server: ServerProcess) -> None:
    """A real server on the default install (ONNX, requirements.txt): a voice of each of the nine stock languages, as
    the OpenAI voices list names it, streams speech in its language (the request names only the voice)."""
    with server.client() as client:
        listed = {v["id"]: v["language"] for v in client.get("/v1/audio/voices").json()["data"]}
        assert {voice: listed[voice] for voice in SENTENCES} == {voice: code for voice, (code, _) in SENTENCES.items()}
        for voice, (_, text) in SENTENCES.items():
            # At twice the rate: the language's G2P and voice are what is checked, and half the audio is half the CPU.
            response = client.post("/tts/stream", json={"text": text, "voice": voice, "speed": 2.0})
            assert response.status_code == 200, (voice, response.text)
            pcm = np.frombuffer(response.content, "<i2")
            assert len(pcm) > 24_000 // 2 and np.abs(pcm).max() > 1000, voice  # over 0.5 s, not silence
