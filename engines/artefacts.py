"""Per-voice files on disk as the engines read them: the registered clips and packs, and the prepared artefacts
under `voices/<id>/prompts/<model-key>/`, shared by the cloning engines.

What a voice costs to prepare is written once per model and read back after a restart or a model switch; each
file is written beside its final name and renamed in, so a crash never leaves half an artefact. Everything read back
is checked first: a damaged prepared artefact is removed and computed again, and a damaged registered file makes
that one voice answer `voice_damaged` (500), logged once, instead of a traceback.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

import numpy as np
import soundfile as sf

from durable import replace_synced
from errors import ServiceError

log = logging.getLogger("polytts.artefacts")

# Far above any prepared array (a 120 s reference at 48 kHz in float32 is 23 MB), far below a memory problem.
MAX_ARTEFACT_BYTES = 256 * 1024 * 1024

_reported: set[tuple[str, int]] = set()
Prepared = TypeVar("Prepared")


def model_key(checkpoint: str) -> str:
    """Names the per-model folder of prepared artefacts: another checkpoint never reuses them."""
    return hashlib.sha256(checkpoint.encode()).hexdigest()[:16]


def damaged(path: Path, why: object) -> ServiceError:
    """The error a voice answers when one of its registered files (`voices/<id>/<file>`) fails its check.

    Logged once per file version, so a client retrying does not flood the log; the folder is left alone for the
    operator (deleting the voice and registering it again repairs it).
    """
    voice_id = path.parent.name
    try:
        version = os.stat(path).st_mtime_ns
    except OSError:
        version = 0
    if (str(path), version) not in _reported:
        _reported.add((str(path), version))
        log.warning("voice %s: stored %s is damaged (%s); the voice answers voice_damaged", voice_id, path.name, why)
    return ServiceError(  # why goes to the log only: it may name this node's paths
        f"voice {voice_id} is damaged on this node (its {path.name} fails its check); delete it and register it again",
        code="voice_damaged",
    )


def read_clip(source: Path, max_seconds: float) -> tuple[np.ndarray, int]:
    """A registered clip as mono float32 samples, cut to `max_seconds`, with its sample rate; a clip that cannot be
    decoded is the voice's `voice_damaged` error."""
    try:
        with sf.SoundFile(source) as clip:
            samples = clip.read(frames=int(max_seconds * clip.samplerate), dtype="float32", always_2d=True)
            rate = clip.samplerate
    except (sf.SoundFileError, RuntimeError, ValueError, OSError) as exc:
        raise damaged(source, exc) from None
    if samples.shape[0] == 0:
        raise damaged(source, "it holds no audio frames")
    return samples.mean(axis=1), rate


def npy_layout(f: BinaryIO, max_bytes: int) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of the .npy file open in `f`, read from its header alone; ValueError unless the header
    describes exactly the bytes that follow (so a header claiming a huge shape is refused before any allocation)."""
    size = os.fstat(f.fileno()).st_size
    if size > max_bytes:
        raise ValueError(f"it is {size} bytes, more than {max_bytes}")
    try:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
    except Exception as exc:  # numpy raises assorted errors (even tokenize's) on a malformed header
        raise ValueError(f"no valid .npy header ({type(exc).__name__}: {exc})") from None
    if dtype.hasobject:
        raise ValueError("it holds Python objects")
    expected = f.tell() + math.prod(shape) * dtype.itemsize
    if size != expected:
        raise ValueError(f"it is {size} bytes where its header describes {expected}")
    return shape, dtype


def read_npy(path: Path, max_bytes: int) -> np.ndarray:
    """An .npy file checked by `npy_layout`, then read without pickles."""
    with open(path, "rb") as f:
        npy_layout(f, max_bytes)
        f.seek(0)
        return np.load(f, allow_pickle=False)


def load_array(path: Path) -> np.ndarray | None:
    """A prepared array read back from disk; None when absent or damaged (then removed, with one warning), so the
    caller computes and saves it again."""
    if not path.is_file():
        return None
    try:
        array = read_npy(path, MAX_ARTEFACT_BYTES)
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            raise ValueError("it holds NaN or infinite values")
    except (OSError, ValueError) as exc:
        _discard(path, exc)
        return None
    return array


def usable_clip(path: Path) -> bool:
    """Whether a prepared clip exists and decodes; a damaged one is removed (with one warning) to be made again."""
    if not path.is_file():
        return False
    try:
        frames = sf.info(str(path)).frames
    except (sf.SoundFileError, RuntimeError, ValueError, OSError) as exc:
        _discard(path, exc)
        return False
    if frames <= 0:
        _discard(path, "it holds no audio frames")
        return False
    return True


def _discard(path: Path, why: object) -> None:
    log.warning("prepared artefact %s is damaged (%s); making it again", path, why)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:  # the rewrite replaces it anyway
        log.warning("could not remove %s: %s", path, exc)


def write_atomically(target: Path, write: Callable[[str], object]) -> None:
    """Let `write` fill a temporary file beside `target`, then rename it in (durably): readers never see half a
    file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        replace_synced(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_array(path: Path, array: np.ndarray) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.save would append ".npy" to a bare name
            np.save(f, array, allow_pickle=False)

    write_atomically(path, write)


class PreparedVoices(Generic[Prepared]):
    """Prepared voices kept in memory, the `limit` most recently used (`setting`, POLYTTS_MAX_VOICES_MEM unless the
    engine has its own); a voice that left is prepared again when next used, from its artefacts on disk."""

    def __init__(
        self,
        engine: str,
        limit: int,
        dropped: Callable[[Prepared], None] = lambda _: None,
        *,
        setting: str = "POLYTTS_MAX_VOICES_MEM",
    ) -> None:
        self.engine = engine
        self.limit = limit
        self.setting = setting
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
                log.info("%s: prepared voice %s dropped from memory (%s)", self.engine, evicted, self.setting)
        self._voices.move_to_end(key)
        return found

    def clear(self) -> None:
        """Forget every voice (the model they were prepared for is gone)."""
        self._voices.clear()

    def __len__(self) -> int:
        return len(self._voices)
