"""Kokoro-82M on PyTorch through hexgrad's `kokoro` package (KModel), for CUDA and Apple MPS hosts.

Weights are a hub id or a local folder with `config.json`, one `.pth` and `voices/*.pt` (see engines/hub.py).
"""

from __future__ import annotations

import gc
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import EngineLoadError
from engines.device import torch_device_memory
from engines.hub import resolve_model_folder, weights_revision
from engines.kokoro.backend import KokoroBackend
from engines.kokoro.voicepacks import read_pack
from errors import NotFound

log = logging.getLogger("polytts.engines.kokoro")

HUB_FILES = ["config.json", "*.pth", "voices/*.pt"]


class TorchBackend(KokoroBackend):
    name = "torch"

    def __init__(self, model: str, device: str) -> None:
        self.model_ref = model
        self.device = device
        self._model: Any = None  # kokoro's KModel (untyped)
        self._folder: Path | None = Path(model).expanduser() if Path(model).expanduser().is_dir() else None
        self._checkpoint: str | None = None
        self._footprint = 0

    @property
    def checkpoint(self) -> str | None:
        return self._checkpoint

    @property
    def footprint(self) -> int:
        return self._footprint

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def vocab(self) -> dict[str, int]:
        return self._model.vocab if self._model is not None else {}

    def preflight(self) -> None:
        resolve_model_folder(self.model_ref, HUB_FILES, "POLYTTS_KOKORO_MODEL")

    def load(self) -> None:
        started = time.perf_counter()
        folder = resolve_model_folder(self.model_ref, HUB_FILES, "POLYTTS_KOKORO_MODEL")
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
        revision = weights_revision(folder, weights)
        self._checkpoint = f"kokoro-torch:{self.model_ref}@{revision[:16]}"
        self._footprint = sum(p.numel() * p.element_size() for p in model.parameters())
        log.info(
            "Kokoro torch loaded from %s on %s in %.2fs (%.0f MB of weights, torch %s)",
            folder,
            self.device,
            time.perf_counter() - started,
            self._footprint / 1e6,
            torch.__version__,
        )

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
            raise NotFound(f"Kokoro has no voice pack {name!r}", code="voice_not_found")
        return read_pack(path.read_bytes(), path.name)

    def infer_timed(self, tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        import torch

        assert self._model is not None
        ids = torch.tensor([[0, *tokens, 0]], dtype=torch.long, device=self.device)
        ref = torch.from_numpy(np.ascontiguousarray(style, dtype=np.float32).reshape(1, -1)).to(self.device)
        audio, durations = self._model.forward_with_tokens(ids, ref, speed)
        return audio.float().cpu().numpy().reshape(-1), durations.cpu().numpy().astype(np.int64).reshape(-1)

    def memory(self) -> dict[str, int]:
        return {"weights_bytes": self._footprint if self.loaded else 0, **torch_device_memory(self.device)}

    def describe(self) -> dict[str, object]:
        return {"model": self.model_ref, "folder": str(self._folder) if self._folder else None}
