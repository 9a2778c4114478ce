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
import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import soundfile as sf

from engines.base import Engine, EngineCaps, EngineLoadError
from engines.hub import file_sha256, resolve_model_folder, snapshot_revision

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


class MlxEngine(Engine, Generic[Prepared]):
    """An mlx-audio model loaded with `mlx_audio.tts.utils.load_model`."""

    def __init__(
        self, *, model: str, setting: str, cache_mb: int, max_voices: int, max_ref_seconds: float, caps: EngineCaps
    ) -> None:
        self.model_ref = model
        self.max_ref_seconds = max_ref_seconds
        self.setting = setting
        self.cache_mb = cache_mb
        self.max_voices = max_voices
        self.caps = caps
        self.model: object | None = None
        self.folder: Path | None = Path(model).expanduser() if Path(model).expanduser().is_dir() else None
        self.owner = ThreadOwner(self.name)
        self._checkpoint: str | None = None
        self._prepared: OrderedDict[str, Prepared] = OrderedDict()
        # Read on the GPU thread after each load, request and unload; /health shows this copy.
        self._memory: dict[str, int] = {}
        self._device = "not loaded"

    # -- lifetime --------------------------------------------------------------------------------------------------

    @property
    def checkpoint(self) -> str | None:
        return self._checkpoint

    @property
    def loaded(self) -> bool:
        return self.model is not None

    @property
    def model_key(self) -> str:
        """Names the per-model folder of prepared voices: another checkpoint never reuses them."""
        return hashlib.sha256((self._checkpoint or self.model_ref).encode()).hexdigest()[:16]

    def load(self) -> None:
        import mlx.core as mx
        from mlx_audio.tts.utils import load_model

        started = time.perf_counter()
        folder = resolve_model_folder(self.model_ref, HUB_FILES, self.setting)
        if not (folder / "config.json").is_file():
            raise EngineLoadError(f"{folder} has no config.json: not an mlx-audio model folder ({self.setting})")
        self.owner.claim()
        mx.set_cache_limit(self.cache_mb * 1024 * 1024)
        self.model = load_model(str(folder))
        self.folder = folder
        weights = sorted(folder.glob("*.safetensors"))
        revision = snapshot_revision(folder) or (file_sha256(weights[0]) if weights else "unknown")
        self._checkpoint = f"mlx-{self.name}:{self.model_ref}@{revision[:16]}"
        self.sample_rate = int(getattr(self.model, "sample_rate", self.sample_rate))
        self._device = str(mx.default_device())
        self._memory = mlx_memory()
        log.info("%s (MLX) loaded from %s on %s in %.2fs", self.name, folder, self._device, time.perf_counter() - started)

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

    # -- prepared voices -------------------------------------------------------------------------------------------

    def prepared(self, key: str, folder: Path, prepare: Callable[[Path], Prepared]) -> Prepared:
        """A voice's prepared artefacts: from memory (LRU), else `prepare(folder)`, which reads them from the per-model
        folder on disk when present and computes and writes them there otherwise."""
        found = self._prepared.get(key)
        if found is None:
            self.owner.check()
            found = prepare(folder / "prompts" / self.model_key)
            self._prepared[key] = found
            while len(self._prepared) > self.max_voices:
                evicted, value = self._prepared.popitem(last=False)
                self.dropped(value)
                log.info("%s: prepared voice %s dropped from memory (POLYTTS_MAX_VOICES_MEM)", self.name, evicted)
        self._prepared.move_to_end(key)
        return found

    def dropped(self, prepared: Prepared) -> None:
        """A prepared voice left memory: release what the engine keeps for it elsewhere."""

    def resampled_clip(self, source: Path, cached: Path) -> np.ndarray:
        """A clip as mono float32 at the model rate, trimmed to max_ref_seconds; computed once, kept on disk."""
        if cached.is_file():
            return np.load(cached, allow_pickle=False)
        from scipy.signal import resample_poly

        with sf.SoundFile(source) as clip:
            samples = clip.read(frames=int(self.max_ref_seconds * clip.samplerate), dtype="float32", always_2d=True)
            rate = clip.samplerate
        divisor = math.gcd(self.sample_rate, rate)
        audio = resample_poly(samples.mean(axis=1), self.sample_rate // divisor, rate // divisor).astype(np.float32)
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


def save_array(path: Path, array: np.ndarray) -> None:
    """Write an array beside its final name, then rename it in: a crash never leaves half an artefact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, array, allow_pickle=False)
    tmp.replace(path)


def to_numpy(audio: object) -> np.ndarray:
    """Evaluate an mx.array on this thread (MLX results can be lazy) and return float32 samples."""
    return np.asarray(audio, dtype=np.float32).reshape(-1)
