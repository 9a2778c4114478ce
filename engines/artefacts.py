"""Per-voice prepared artefacts on disk, under `voices/<id>/prompts/<model-key>/`, shared by the cloning engines.

What a voice costs to prepare is written once per model and read back after a restart or a model switch; each
file is written beside its final name and renamed in, so a crash never leaves half an artefact.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import soundfile as sf

log = logging.getLogger("polytts.engines")

Prepared = TypeVar("Prepared")


def model_key(checkpoint: str) -> str:
    """Names the per-model folder of prepared artefacts: another checkpoint never reuses them."""
    return hashlib.sha256(checkpoint.encode()).hexdigest()[:16]


def read_clip(source: Path, max_seconds: float) -> tuple[np.ndarray, int]:
    """A clip as mono float32 samples, cut to `max_seconds`, with its sample rate."""
    with sf.SoundFile(source) as clip:
        samples = clip.read(frames=int(max_seconds * clip.samplerate), dtype="float32", always_2d=True)
        return samples.mean(axis=1), clip.samplerate


def write_atomically(target: Path, write: Callable[[str], object]) -> None:
    """Let `write` fill a temporary file beside `target`, then rename it in: readers never see half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_array(path: Path, array: np.ndarray) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.save would append ".npy" to a bare name
            np.save(f, array, allow_pickle=False)

    write_atomically(path, write)


class PreparedVoices(Generic[Prepared]):
    """Prepared voices kept in memory, the `limit` most recently used (POLYTTS_MAX_VOICES_MEM); a voice that left is
    prepared again when next used, from its artefacts on disk."""

    def __init__(self, engine: str, limit: int, dropped: Callable[[Prepared], None] = lambda _: None) -> None:
        self.engine = engine
        self.limit = limit
        self.dropped = dropped
        """Told of each voice the bound pushes out, to release what the engine keeps for it elsewhere."""
        self._voices: OrderedDict[str, Prepared] = OrderedDict()

    def get(self, key: str, prepare: Callable[[], Prepared]) -> Prepared:
        found = self._voices.get(key)
        if found is None:
            found = self._voices[key] = prepare()
            while len(self._voices) > self.limit:
                evicted, value = self._voices.popitem(last=False)
                self.dropped(value)
                log.info("%s: prepared voice %s dropped from memory (POLYTTS_MAX_VOICES_MEM)", self.engine, evicted)
        self._voices.move_to_end(key)
        return found

    def clear(self) -> None:
        """Forget every voice (the model they were prepared for is gone)."""
        self._voices.clear()

    def __len__(self) -> int:
        return len(self._voices)
