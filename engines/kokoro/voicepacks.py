"""Kokoro voice packs: what a pack is, reading an uploaded one, its content id, and mixing packs into a blend's.

A pack is one float tensor of shape (510, 1, 256); row n-1 is the style vector for an utterance of n phoneme tokens.
Uploads are untrusted and are read by `engines.tensor_files`, which never runs pickled code and caps what a container
may expand to; every refusal is a 422 `InvalidInput` with a stable `pack_*` code. The same tensor has the same id
whatever file format carried it (`pack_id`).

A stored pack is read back with `read_stored_pack`, which checks it against its content id: a damaged one is the
voice's `voice_damaged` error. A blend (`engines.blends`) is its packs mixed by weight (`mix`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engines.artefacts import damaged, npy_layout, read_npy
from engines.tensor_files import (
    TENSOR_SUFFIXES,
    NeedsTorch,
    NotFloat,
    NotOneTensor,
    TensorFileError,
    Unsafe,
    read_tensor,
)
from errors import InvalidInput

PACK_SHAPE = (510, 1, 256)

# The largest float64 pack plus a generous .npy header: anything inside a container that expands past this cannot be
# a pack, so it is refused before it is read (a zip member can be a decompression bomb).
_MAX_MEMBER_BYTES = math.prod(PACK_SHAPE) * 8 + 64 * 1024


def read_pack(data: bytes, filename: str) -> np.ndarray:
    """Parse and validate an uploaded pack; returns a C-contiguous float32 array of PACK_SHAPE.

    Never executes pickled code. The format is chosen by the filename's suffix, case-insensitively.
    """
    lowered = filename.lower()
    suffix = next((s for s in TENSOR_SUFFIXES if lowered.endswith(s)), None)
    if suffix is None:
        raise InvalidInput(
            f"voice pack {filename!r} has an unknown format; upload one of {', '.join(TENSOR_SUFFIXES)}",
            code="pack_format",
            detail={"accepted": list(TENSOR_SUFFIXES)},
        )
    try:
        array = read_tensor(data, suffix, _MAX_MEMBER_BYTES)
    except TensorFileError as exc:
        raise _refusal(exc) from None
    return _finish(array)


def pack_id(pack: np.ndarray) -> str:
    """Content-hashed id of a pack: the same tensor gives the same id whatever file format carried it."""
    if pack.shape != PACK_SHAPE:
        raise ValueError(f"pack has shape {pack.shape}, expected {PACK_SHAPE}")
    digest = hashlib.sha256(np.ascontiguousarray(pack, dtype="<f4").tobytes())
    digest.update(b"|kokoro-pack")
    return digest.hexdigest()[:16]


def mix(packs: Sequence[tuple[np.ndarray, float]]) -> np.ndarray:
    """Weighted sum of packs (weights already normalised); float32 PACK_SHAPE."""
    if not packs:
        raise ValueError("mix needs at least one pack")
    total = np.zeros(PACK_SHAPE, dtype=np.float64)  # accumulate wide so the order of parts does not matter
    for pack, weight in packs:
        if pack.shape != PACK_SHAPE:
            raise ValueError(f"pack has shape {pack.shape}, expected {PACK_SHAPE}")
        total += weight * pack.astype(np.float64)
    return np.ascontiguousarray(total, dtype=np.float32)


def stored_pack_problem(path: Path) -> str | None:
    """Why a stored pack file cannot hold a pack, judged from its size and .npy header without reading its values
    (cheap enough for every voice at start-up); None when it looks whole."""
    try:
        with open(path, "rb") as f:
            shape, dtype = npy_layout(f, _MAX_MEMBER_BYTES)
    except (OSError, ValueError) as exc:
        return str(exc)
    if shape != PACK_SHAPE or not np.issubdtype(dtype, np.floating):
        return f"it holds {dtype} values of shape {shape}, not a {PACK_SHAPE} float pack"
    return None


def read_stored_pack(path: Path, voice_id: str) -> np.ndarray:
    """A registered pack read back in full and checked against its content id (its voice id): a damaged file is the
    voice's `voice_damaged` error, logged once."""
    try:
        pack = _finish(read_npy(path, _MAX_MEMBER_BYTES))
    except (OSError, ValueError) as exc:
        raise damaged(path, exc) from None
    except InvalidInput as exc:
        raise damaged(path, exc.message) from None
    if pack_id(pack) != voice_id:
        raise damaged(path, "its values no longer match the voice id")
    return pack


def _refusal(exc: TensorFileError) -> InvalidInput:
    """Why an uploaded file is no pack, in the words and `pack_*` codes clients know."""
    if isinstance(exc, Unsafe):
        return InvalidInput(
            f"{exc.what} holds pickled code or objects other than tensors; refused without running it",
            code="pack_unsafe",
        )
    if isinstance(exc, NotOneTensor):
        return InvalidInput(f"{exc.what} must hold exactly one tensor: {exc.why}", code="pack_contents")
    if isinstance(exc, NotFloat):
        floats = f" ({exc.floats})" if exc.floats else ""
        return InvalidInput(
            f"voice pack holds {exc.found} values; a pack must be floating point{floats}",
            code="pack_dtype",
            detail={"found": exc.found},
        )
    if isinstance(exc, NeedsTorch):
        return InvalidInput(
            ".pt voice packs need torch, which this node does not have; upload the pack as .npy, .npz or .safetensors",
            code="pack_format",
            detail={"accepted": [s for s in TENSOR_SUFFIXES if s != ".pt"]},
        )
    return InvalidInput(f"{exc.what} cannot be read as a voice pack: {exc.why}", code="pack_unreadable")


def _finish(array: np.ndarray) -> np.ndarray:
    """The checks every format shares, in the order a user fixes them: dtype, shape, values."""
    if not np.issubdtype(array.dtype, np.floating):
        raise InvalidInput(
            f"voice pack holds {array.dtype.name} values; a pack must be floating point",
            code="pack_dtype",
            detail={"found": array.dtype.name},
        )
    if array.shape != PACK_SHAPE:
        raise InvalidInput(
            f"voice pack has shape {tuple(array.shape)}; expected {PACK_SHAPE}",
            code="pack_shape",
            detail={"found": list(array.shape), "expected": list(PACK_SHAPE)},
        )
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf, refused just below
        pack = np.array(array, dtype=np.float32, order="C")  # a copy: native byte order, owns and may write its memory
    bad = int(pack.size - np.count_nonzero(np.isfinite(pack)))
    if bad:
        raise InvalidInput(
            f"voice pack holds {bad} NaN or infinite values (after conversion to float32)",
            code="pack_values",
            detail={"nonfinite": bad},
        )
    return pack
