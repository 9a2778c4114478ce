"""Per-voice prepared artefacts on disk, under `voices/<id>/prompts/<model-key>/`, shared by the cloning engines.

What a voice costs to prepare is written once per model and read back after a restart or a model switch; each
file is written beside its final name and renamed in, so a crash never leaves half an artefact.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf


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
