"""Kokoro-82M on MLX (mlx-audio), the Kokoro backend of the MLX runtime on Apple Silicon.

The engine around it (engines/kokoro/engine.py) keeps doing the G2P, chunking and voices, so built-in packs, blends and
uploaded packs behave as on the other backends. mlx-audio's model takes a phoneme string and a style row; the packs
are `voices/<name>.safetensors` in the model folder. Every call runs on the thread that loaded the model.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from engines.hub import resolve_model_folder
from engines.kokoro.backend import KokoroBackend
from engines.kokoro.voicepacks import PACK_SHAPE
from engines.mlx_base import HUB_FILES, ThreadOwner, load_mlx_model, mlx_memory, to_numpy
from errors import InvalidInput, NotFound

log = logging.getLogger("polytts.engines.kokoro")


class MlxKokoroBackend(KokoroBackend):
    name = "mlx"

    def __init__(self, model: str, cache_mb: int) -> None:
        self.model_ref = model
        self.cache_mb = cache_mb
        self.device = "mlx"
        self.owner = ThreadOwner("kokoro")
        self._model: Any = None  # mlx-audio's Kokoro model (untyped)
        self._folder: Path | None = Path(model).expanduser() if Path(model).expanduser().is_dir() else None
        self._symbols: dict[int, str] = {}
        self._checkpoint: str | None = None
        self._memory: dict[str, int] = {}
        self._loaded_bytes = 0

    @property
    def checkpoint(self) -> str | None:
        return self._checkpoint

    @property
    def footprint(self) -> int:
        """The allocator's active memory right after the load: the weights as they sit in device memory."""
        return self._loaded_bytes if self.loaded else 0

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def vocab(self) -> dict[str, int]:
        return {symbol: token for token, symbol in self._symbols.items()}

    def preflight(self) -> None:
        resolve_model_folder(self.model_ref, HUB_FILES, "POLYTTS_MLX_KOKORO_MODEL")

    def load(self) -> None:
        started = time.perf_counter()
        loaded = load_mlx_model(self.model_ref, "POLYTTS_MLX_KOKORO_MODEL", self.cache_mb, self.owner)
        self._model, self._folder, self.device = loaded.model, loaded.folder, loaded.device
        self._symbols = {token: symbol for symbol, token in self._model.vocab.items()}
        self._checkpoint = f"kokoro-mlx:{self.model_ref}@{loaded.revision[:16]}"
        self._memory = mlx_memory()
        self._loaded_bytes = self._memory["active"]
        log.info("Kokoro MLX loaded from %s on %s in %.2fs", self._folder, self.device, time.perf_counter() - started)

    def unload(self) -> None:
        import mlx.core as mx

        self.owner.check()
        self._model = None
        mx.clear_cache()
        self._memory = mlx_memory()
        self.owner.release()

    def release(self) -> None:
        import mlx.core as mx

        if self._model is not None:
            self.owner.check()
            mx.clear_cache()
            self._memory = mlx_memory()

    def pack_names(self) -> list[str]:
        if self._folder is None:
            return []
        return sorted(p.stem for p in (self._folder / "voices").glob("*.safetensors"))

    def pack(self, name: str) -> np.ndarray:
        import mlx.core as mx

        self.owner.check()
        path = self._folder / "voices" / f"{name}.safetensors" if self._folder else None
        if path is None or not path.is_file():
            raise NotFound(f"Kokoro has no voice pack {name!r}", code="voice_not_found")
        arrays = mx.load(str(path))
        if not isinstance(arrays, dict) or len(arrays) != 1:
            raise InvalidInput(f"voice pack {name!r} must hold one array", code="pack_contents")
        return to_numpy(next(iter(arrays.values()))).reshape(PACK_SHAPE)

    def infer_timed(self, tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        import mlx.core as mx

        assert self._model is not None
        self.owner.check()
        phonemes = "".join(self._symbols[token] for token in tokens)  # the MLX model takes phonemes, not ids
        output = self._model(
            phonemes,
            ref_s=mx.array(np.asarray(style, dtype=np.float32).reshape(1, -1)),
            speed=speed,
            return_output=True,
        )
        # Evaluated here, on the thread that owns the model's streams; pred_dur has one entry per token and pad.
        return to_numpy(output.audio), np.asarray(output.pred_dur, dtype=np.int64).reshape(-1)

    def memory(self) -> dict[str, int]:
        return self._memory

    def describe(self) -> dict[str, object]:
        return {"model": self.model_ref, "mlx_threads": sorted(self.owner.threads_seen)}
