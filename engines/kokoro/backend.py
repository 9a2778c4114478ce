"""What a Kokoro backend is: the interface the ONNX, PyTorch and MLX backends implement, and the limits they share.

The engine (engines/kokoro/engine.py) does the G2P, the chunking and the voices and builds one backend; a backend
turns a window of phoneme tokens and a style vector into audio. Backends import this module, never the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

import numpy as np

from errors import NotFound

MAX_TOKENS = 510
"""Phoneme tokens one inference takes at most (the model's context, less the padding token at each end)."""

BackendName = Literal["torch", "onnx", "mlx"]


class KokoroBackend(ABC):
    """How phoneme tokens and a style vector become audio; the engine does everything else."""

    name: BackendName
    device: str
    lanes: int = 1
    """Inferences it may run at once, from several threads (ONNX Runtime on a CPU node); 1: one at a time, on the
    GPU thread."""
    stops_cheaply: bool = False
    """Whether an inference stopped mid-run leaves the runtime as fast as before (`engines.base.Engine.stops_cheaply`)."""

    @property
    @abstractmethod
    def checkpoint(self) -> str | None: ...

    @property
    @abstractmethod
    def footprint(self) -> int: ...

    @property
    @abstractmethod
    def loaded(self) -> bool: ...

    @property
    @abstractmethod
    def vocab(self) -> dict[str, int]: ...

    def preflight(self) -> None:
        """Raise EngineLoadError when the weights cannot be had now (see Engine.preflight)."""

    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def unload(self) -> None: ...

    def pack_names(self) -> list[str]:
        """Voice packs that come with these weights (a model folder's `voices/`), listed without loading the
        model; the stock packs come from engines/kokoro/stock_voices.py on every backend."""
        return []

    def pack(self, name: str) -> np.ndarray:
        """One of `pack_names()`, shape PACK_SHAPE (model loaded)."""
        raise NotFound(f"Kokoro has no voice pack {name!r} with these weights", code="voice_not_found")

    @abstractmethod
    def infer_timed(self, tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        """Audio for at most MAX_TOKENS tokens, and how many frames the model gave each token (int64, len(tokens) + 2
        entries: the padding token at each end comes first and last; speed already applied)."""

    def infer(self, tokens: list[int], style: np.ndarray, speed: float) -> np.ndarray:
        """Audio for at most MAX_TOKENS tokens."""
        return self.infer_timed(tokens, style, speed)[0]

    def memory(self) -> dict[str, int]:
        """Device memory in use, for /health."""
        return {}

    def release(self) -> None:
        """After each request (on the GPU thread): give cached device memory back."""

    def describe(self) -> dict[str, object]:
        return {}
