"""What every mlx-audio engine shares: loading on the GPU thread, thread ownership, memory, prepared voices.

MLX streams belong to the thread that created them: weights loaded on one thread and a generation evaluated on
another abort the process. So an MLX engine remembers the thread that loaded it and refuses (with an error, not a
crash) any model call from another; the service runs all of them on its one GPU thread anyway.

Prepared voices (speaker embeddings, reference codes, resampled references) are computed once, kept in memory under
an LRU bound, and persisted per model under `voices/<id>/prompts/<model-key>/`, so neither a restart nor a model
switch computes them again.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from engines.artefacts import PreparedVoices, load_array, read_clip, save_array
from engines.base import BuiltinVoice, Engine, EngineCaps, EngineLoadError
from engines.hub import HubModel, resolve_model_folder, weights_revision

log = logging.getLogger("polytts.engines.mlx")

HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "voices/*", "**/*.json", "**/*.safetensors"]
Prepared = TypeVar("Prepared")


class WrongThread(RuntimeError):
    """An MLX call from a thread other than the one that loaded the model."""


class ThreadOwner:
    """Remembers the thread that loaded an MLX model and refuses model calls from any other."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ident: int | None = None
        self.threads_seen: set[str] = set()

    def claim(self) -> None:
        self.ident = threading.get_ident()
        self.check()

    def release(self) -> None:
        self.ident = None

    def check(self) -> None:
        """Every MLX call goes through here first: the loading thread only."""
        current = threading.current_thread()
        self.threads_seen.add(current.name)
        if self.ident is not None and current.ident != self.ident:
            raise WrongThread(
                f"{self.name}: MLX call on thread {current.name!r}; the model belongs to the thread that loaded it"
            )


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    folder: Path
    revision: str
    """What identifies the weights (hub commit or weights hash), for checkpoints."""
    device: str


def load_mlx_model(model_ref: str, setting: str, cache_mb: int, owner: ThreadOwner) -> LoadedModel:
    """Resolve the weights, make the calling thread the model's owner, cap the allocator cache, and load with
    mlx-audio's `load_model` (weights evaluated here, on the owner thread)."""
    import mlx.core as mx
    from mlx_audio.tts.utils import load_model

    folder = resolve_model_folder(model_ref, HUB_FILES, setting)
    if not (folder / "config.json").is_file():
        raise EngineLoadError(f"{folder} has no config.json: not an mlx-audio model folder ({setting})")
    owner.claim()
    mx.set_cache_limit(cache_mb * 1024 * 1024)
    model = load_model(str(folder))
    revision = weights_revision(folder, sorted(folder.glob("*.safetensors")))
    return LoadedModel(model, folder, revision, str(mx.default_device()))


class MlxEngine(HubModel, Engine, Generic[Prepared]):
    """An mlx-audio model loaded with `mlx_audio.tts.utils.load_model`."""

    hub_files = HUB_FILES

    def __init__(
        self, *, model: str, setting: str, cache_mb: int, max_voices: int, max_ref_seconds: float, caps: EngineCaps
    ) -> None:
        self.model_ref = model
        self.max_ref_seconds = max_ref_seconds
        self.setting = setting
        self.cache_mb = cache_mb
        self.caps = caps
        self.model: Any = None  # the mlx-audio model (untyped)
        self.folder: Path | None = Path(model).expanduser() if Path(model).expanduser().is_dir() else None
        self.owner = ThreadOwner(self.name)
        self._prepared: PreparedVoices[Prepared] = PreparedVoices(self.name, max_voices, self.dropped)
        # Read on the GPU thread after each load, request and unload; /health shows this copy.
        self._memory: dict[str, int] = {}
        self._loaded_bytes = 0
        self._device = "not loaded"

    # -- lifetime --------------------------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self.model is not None

    @property
    def footprint(self) -> int:
        """The allocator's active memory right after the load: the weights as they sit in device memory."""
        return self._loaded_bytes if self.loaded else 0

    def load(self) -> None:
        started = time.perf_counter()
        loaded = load_mlx_model(self.model_ref, self.setting, self.cache_mb, self.owner)
        self.model, self.folder, self._device = loaded.model, loaded.folder, loaded.device
        self._checkpoint = f"mlx-{self.name}:{self.model_ref}@{loaded.revision[:16]}"
        self.sample_rate = int(getattr(self.model, "sample_rate", self.sample_rate))
        self._memory = mlx_memory()
        self._loaded_bytes = self._memory["active"]
        log.info(
            "%s (MLX) loaded from %s on %s in %.2fs",
            self.name,
            self.folder,
            self._device,
            time.perf_counter() - started,
        )

    def unload(self) -> None:
        import mlx.core as mx

        self.owner.check()
        self.model = None
        self._prepared.clear()
        gc.collect()
        mx.clear_cache()
        self._memory = mlx_memory()
        self.owner.release()

    def release(self) -> None:
        """After each request: hand the allocator's cached buffers back."""
        import mlx.core as mx

        if self.model is not None:
            self.owner.check()
            mx.clear_cache()
            self._memory = mlx_memory()

    def builtin_voices(self) -> list[BuiltinVoice]:
        """The MLX engines clone from registered clips; Kokoro on MLX is a backend of the Kokoro engine."""
        return []

    # -- prepared voices -------------------------------------------------------------------------------------------

    def prepared(self, key: str, folder: Path, prepare: Callable[[Path], Prepared]) -> Prepared:
        """A voice's prepared artefacts: from memory (LRU), else `prepare(folder)`, which reads them from the per-model
        folder on disk when present and computes and writes them there otherwise."""

        def build() -> Prepared:
            self.owner.check()
            return prepare(folder / "prompts" / self.model_key)

        return self._prepared.get(key, build)

    def dropped(self, prepared: Prepared) -> None:
        """A prepared voice left memory: release what the engine keeps for it elsewhere."""

    def resampled_clip(self, source: Path, cached: Path) -> np.ndarray:
        """A clip as mono float32 at the model rate, trimmed to max_ref_seconds; computed once, kept on disk."""
        found = load_array(cached)
        if found is not None:
            return found
        from scipy.signal import resample_poly

        samples, rate = read_clip(source, self.max_ref_seconds)
        divisor = math.gcd(self.sample_rate, rate)
        audio = resample_poly(samples, self.sample_rate // divisor, rate // divisor).astype(np.float32)
        save_array(cached, audio)
        return audio

    # -- reporting -------------------------------------------------------------------------------------------------

    def describe(self) -> dict[str, object]:
        return {
            "backend": "mlx",
            "device": self._device,
            "checkpoint": self._checkpoint,
            "model": self.model_ref,
            "loaded": self.loaded,
            "prepared_voices": len(self._prepared),
            "mlx_threads": sorted(self.owner.threads_seen),
            "memory": self._memory,
        }


def mlx_memory() -> dict[str, int]:
    """Active, peak and cache memory of the MLX allocator (these work on the CPU build too)."""
    import mlx.core as mx

    return {"active": mx.get_active_memory(), "peak": mx.get_peak_memory(), "cache": mx.get_cache_memory()}


def to_numpy(audio: object) -> np.ndarray:
    """Evaluate an mx.array on this thread (MLX results can be lazy) and return float32 samples."""
    return np.asarray(audio, dtype=np.float32).reshape(-1)
