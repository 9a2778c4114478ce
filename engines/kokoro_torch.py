"""Kokoro-82M on PyTorch through hexgrad's `kokoro` package (KModel), for CUDA and Apple MPS hosts.

Weights are a hub id (fetched into the standard hub cache when the host is online) or a local folder with
`config.json`, one `.pth` and `voices/*.pt`. Offline, a hub id that is not cached fails at once with a clear
reason: nothing here waits for a network timeout.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from engines.base import EngineLoadError
from engines.kokoro import KokoroBackend
from engines.voicepacks import read_pack
from errors import InvalidInput

log = logging.getLogger("polytts.engines.kokoro")

HUB_FILES = ["config.json", "*.pth", "voices/*.pt"]
HUB_PROBE_SECONDS = 3.0


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """False when the hub's offline mode is set or its host cannot be reached within `timeout` (DNS included)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    reached = threading.Event()

    def probe() -> None:
        try:
            with socket.create_connection((host, 443), timeout=timeout):
                reached.set()
        except OSError:
            pass

    # getaddrinfo has no timeout of its own, so the probe runs where it can be abandoned.
    threading.Thread(target=probe, name="polytts-hub-probe", daemon=True).start()
    return reached.wait(timeout)


def resolve_model_folder(model: str) -> Path:
    """A local folder as is; a hub id from the hub cache, downloading only when the hub is reachable."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if model.startswith(("/", ".", "~")) or model.count("/") != 1:
        raise EngineLoadError(f"Kokoro model folder {model} does not exist (POLYTTS_KOKORO_MODEL)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model, allow_patterns=HUB_FILES, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (the hub library raises several kinds)
        if not hub_reachable():
            raise EngineLoadError(
                f"Kokoro weights {model} are not in the hub cache and the hub cannot be reached (offline); "
                "set POLYTTS_KOKORO_MODEL to a local folder with config.json, a .pth and voices/*.pt"
            ) from None
    log.info("downloading %s from the hub", model)
    try:
        return Path(snapshot_download(model, allow_patterns=HUB_FILES))
    except Exception as exc:  # noqa: BLE001 - any download failure is a load failure with its reason
        raise EngineLoadError(f"could not download Kokoro weights {model}: {exc}") from exc


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class TorchBackend(KokoroBackend):
    name = "torch"

    def __init__(self, model: str, device: str) -> None:
        self.model_ref = model
        self.device = device
        self._model: object | None = None
        self._folder: Path | None = Path(model).expanduser() if Path(model).expanduser().is_dir() else None
        self._checkpoint = f"kokoro-torch:{model}@unloaded"
        self._footprint = 0

    @property
    def checkpoint(self) -> str:
        return self._checkpoint

    @property
    def footprint(self) -> int:
        return self._footprint

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def vocab(self) -> dict[str, int]:
        return self._model.vocab if self._model is not None else {}  # type: ignore[attr-defined]

    def load(self) -> None:
        started = time.perf_counter()
        folder = resolve_model_folder(self.model_ref)
        config = folder / "config.json"
        weights = sorted(folder.glob("*.pth"))
        if not config.is_file() or len(weights) != 1:
            raise EngineLoadError(f"{folder} needs config.json and exactly one .pth (found {len(weights)})")
        import torch
        from kokoro import KModel

        model = KModel(repo_id="hexgrad/Kokoro-82M", config=str(config), model=str(weights[0]))
        self._model = model.to(self.device).eval()
        self._folder = folder
        # A hub snapshot folder is named by its commit; a local folder is identified by its weights' hash.
        revision = folder.name if folder.parent.name == "snapshots" else _sha256(weights[0])
        self._checkpoint = f"kokoro-torch:{self.model_ref}@{revision[:16]}"
        self._footprint = sum(p.numel() * p.element_size() for p in model.parameters())
        log.info(
            "Kokoro torch loaded from %s on %s in %.2fs (%.0f MB of weights, torch %s)",
            folder, self.device, time.perf_counter() - started, self._footprint / 1e6, torch.__version__,
        )  # fmt: skip

    def unload(self) -> None:
        self._model = None
        gc.collect()

    def pack_names(self) -> list[str]:
        if self._folder is None:
            return []
        return sorted(p.stem for p in (self._folder / "voices").glob("*.pt"))

    def pack(self, name: str) -> np.ndarray:
        path = self._folder / "voices" / f"{name}.pt" if self._folder else None
        if path is None or not path.is_file():
            raise InvalidInput(f"Kokoro has no voice pack {name!r}", code="voice_not_found")
        return read_pack(path.read_bytes(), path.name)

    def infer(self, tokens: list[int], style: np.ndarray, speed: float) -> np.ndarray:
        import torch

        assert self._model is not None
        ids = torch.tensor([[0, *tokens, 0]], dtype=torch.long, device=self.device)
        ref = torch.from_numpy(np.ascontiguousarray(style, dtype=np.float32).reshape(1, -1)).to(self.device)
        audio, _ = self._model.forward_with_tokens(ids, ref, speed)  # type: ignore[attr-defined]
        return audio.float().cpu().numpy().reshape(-1)

    def memory(self) -> dict[str, int]:
        import torch

        if self.device == "cuda":
            return {"cuda_allocated": torch.cuda.memory_allocated(), "cuda_reserved": torch.cuda.memory_reserved()}
        if self.device == "mps":
            return {"mps_allocated": torch.mps.current_allocated_memory()}
        return {"weights_bytes": self._footprint if self.loaded else 0}

    def describe(self) -> dict[str, object]:
        return {"model": self.model_ref, "folder": str(self._folder) if self._folder else None}
