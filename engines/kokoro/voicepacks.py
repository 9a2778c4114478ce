"""Kokoro voice packs: reading uploaded packs safely, content ids, and weighted blends.

A pack is one float tensor of shape (510, 1, 256); row n-1 is the style vector for an utterance of n phoneme tokens.
Uploads are untrusted: `.pt` files are pickles, so they are only ever opened with torch's weights-only unpickler, and
`.npy`/`.npz` are opened with `allow_pickle=False`. `.safetensors` is parsed here, without any library, so a node
without torch still accepts it. Zip members (`.npz`, the zip form of `.pt`) are decompressed under a byte cap on what
actually comes out, whatever their headers claim. Every refusal is a 422 `InvalidInput` with a stable `pack_*` code.

A stored pack is read back with `read_stored_pack`, which checks it against its content id: a damaged one is the
voice's `voice_damaged` error.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import pickle
import pickletools
import re
import struct
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from engines.artefacts import damaged, npy_layout, read_npy
from errors import InvalidInput
from voicebank.voice_entry import excerpt

log = logging.getLogger("polytts.voicepacks")

PACK_SHAPE = (510, 1, 256)
PACK_SUFFIXES = (".pt", ".npy", ".npz", ".safetensors")

# The largest float64 pack plus a generous .npy header: anything inside a container that expands past this cannot be
# a pack, so it is refused before it is read (a zip member can be a decompression bomb).
_MAX_MEMBER_BYTES = math.prod(PACK_SHAPE) * 8 + 64 * 1024
# A .pt archive holds the pickle, the tensor's storage and a few small records.
_MAX_PT_ARCHIVE_BYTES = 2 * _MAX_MEMBER_BYTES
# Methods whose reads zipfile bounds by the bytes asked for; it decompresses bzip2 and LZMA chunks without a bound.
_ZIP_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
_ZIP_READ = 64 * 1024
_MAX_SAFETENSORS_HEADER = 1024 * 1024
_PICKLE_PROTO = b"\x80"  # every pickle of protocol 2 or later starts with the PROTO opcode
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")

# safetensors float dtypes -> how their bytes are read; BF16 is read as raw uint16 and widened by hand.
_SAFETENSORS_FLOATS = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "BF16": "<u2"}

_BLEND_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_BLEND_WEIGHTED = re.compile(r"(?P<name>[^()]*?)\s*\((?P<weight>[^()]*)\)")
_BLEND_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_MAX_BLEND_PARTS = 8
_MAX_QUOTED_PART = 100  # a name (64) and a weight fit


def read_pack(data: bytes, filename: str) -> np.ndarray:
    """Parse and validate an uploaded pack; returns a C-contiguous float32 array of PACK_SHAPE.

    Never executes pickled code. The format is chosen by the filename's suffix, case-insensitively.
    """
    lowered = filename.lower()
    suffix = next((s for s in PACK_SUFFIXES if lowered.endswith(s)), None)
    if suffix == ".pt":
        array = _read_pt(data)
    elif suffix == ".npy":
        array = _read_npy(data, "the .npy file")
    elif suffix == ".npz":
        array = _read_npz(data)
    elif suffix == ".safetensors":
        array = _read_safetensors(data)
    else:
        raise InvalidInput(
            f"voice pack {filename!r} has an unknown format; upload one of {', '.join(PACK_SUFFIXES)}",
            code="pack_format",
            detail={"accepted": list(PACK_SUFFIXES)},
        )
    return _finish(array)


def pack_id(pack: np.ndarray) -> str:
    """Content-hashed id of a pack: the same tensor gives the same id whatever file format carried it."""
    if pack.shape != PACK_SHAPE:
        raise ValueError(f"pack has shape {pack.shape}, expected {PACK_SHAPE}")
    digest = hashlib.sha256(np.ascontiguousarray(pack, dtype="<f4").tobytes())
    digest.update(b"|kokoro-pack")
    return digest.hexdigest()[:16]


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


@dataclass(frozen=True)
class BlendPart:
    name: str
    weight: float


def is_blend(name: str) -> bool:
    """True when a voice name is a blend formula rather than a single name."""
    return "+" in name or "(" in name


def parse_blend(formula: str) -> list[BlendPart]:
    """Parse `name(weight)+name(weight)+...`; whitespace around parts allowed; weights normalised to sum to 1."""
    if not formula.strip():
        _blend_error("", 0, "the blend formula is empty")
    texts = _split_blend(formula)
    if len(texts) > _MAX_BLEND_PARTS:
        _blend_error(texts[_MAX_BLEND_PARTS], _MAX_BLEND_PARTS, f"a blend has at most {_MAX_BLEND_PARTS} parts")
    parts: list[BlendPart] = []
    for index, text in enumerate(texts):
        part = _parse_blend_part(text, index)
        if any(p.name == part.name for p in parts):
            _blend_error(text, index, f"voice {part.name!r} appears twice")
        parts.append(part)
    return _normalised(parts)


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


def canonical_blend(parts: Sequence[BlendPart]) -> str:
    """A stable spelling of a blend for cache keys and logs.

    Parts stay in the given order, weights are normalised and written with 4 decimals:
    'af_bella(0.6667)+af_sky(0.3333)'.
    """
    if not parts:
        raise ValueError("a blend needs at least one part")
    return "+".join(f"{p.name}({p.weight:.4f})" for p in _normalised(parts))


# --- reading packs ---------------------------------------------------------------------------------------------


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


def _unreadable(what: str, why: object) -> InvalidInput:
    return InvalidInput(f"{what} cannot be read as a voice pack: {why}", code="pack_unreadable")


def _unsafe(what: str) -> InvalidInput:
    return InvalidInput(
        f"{what} holds pickled code or objects other than tensors; refused without running it", code="pack_unsafe"
    )


def _contents(what: str, why: str) -> InvalidInput:
    return InvalidInput(f"{what} must hold exactly one tensor: {why}", code="pack_contents")


def _read_pt(data: bytes) -> np.ndarray:
    try:
        import torch  # lazily: nodes serving only ONNX do not install it
    except ImportError:
        raise InvalidInput(
            ".pt voice packs need torch, which this node does not have; upload the pack as .npy, .npz or .safetensors",
            code="pack_format",
            detail={"accepted": [s for s in PACK_SUFFIXES if s != ".pt"]},
        ) from None
    if data.startswith(_ZIP_MAGIC):
        _check_pt_archive(data)
    try:
        loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        # The weights-only unpickler says UnpicklingError both for a pickle it refuses and for bytes that are no
        # pickle at all; only a stream that is a well-formed pickle was refused for what it holds.
        if isinstance(exc, pickle.UnpicklingError) and _is_wellformed_pickle(_pt_pickle_stream(data)):
            log.warning("refused a .pt voice pack holding objects other than tensors: %s", str(exc).splitlines()[0])
            raise _unsafe("the .pt file") from None
        raise _unreadable("the .pt file", type(exc).__name__) from None
    if isinstance(loaded, dict):
        if len(loaded) != 1:
            raise _contents("the .pt file", f"found a dict of {len(loaded)} entries")
        (loaded,) = loaded.values()
    if not isinstance(loaded, torch.Tensor):
        raise _contents("the .pt file", f"found {type(loaded).__name__}")
    if loaded.layout != torch.strided:
        raise _contents("the .pt file", f"found a {loaded.layout} tensor")
    if not loaded.is_floating_point():
        found = str(loaded.dtype).removeprefix("torch.")
        raise InvalidInput(
            f"voice pack holds {found} values; a pack must be floating point",
            code="pack_dtype",
            detail={"found": found},
        )
    return loaded.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


def _check_pt_archive(data: bytes) -> None:
    """Refuse a .pt archive before torch reads it when its records could expand past any pack: torch allocates what a
    record's header claims and inflates it, so every claim is checked here, with the compression methods."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise _unreadable("the .pt file", exc) from None
    if any(m.compress_type not in _ZIP_METHODS for m in members):
        raise _unreadable("the .pt file", "it uses a compression method other than stored or deflated")
    claimed = sum(m.file_size for m in members)
    if claimed > _MAX_PT_ARCHIVE_BYTES:
        raise _unreadable("the .pt file", f"its records expand to {claimed} bytes")


def _pt_pickle_stream(data: bytes) -> bytes:
    """The pickle torch reads first: `<archive>/data.pkl` of the zip format, else the file itself (legacy format)."""
    if not data.startswith(_ZIP_MAGIC):
        return data
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = next((i for i in archive.infolist() if i.filename.endswith("data.pkl")), None)
            return b"" if info is None else read_zip_member(archive, info)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        return b""


def read_zip_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, limit: int = _MAX_MEMBER_BYTES) -> bytes:
    """A zip member decompressed in small reads, refused (ValueError) as soon as more than `limit` bytes come out: the
    cap is on the bytes produced, not on the size the header claims. Only stored or deflated members: zipfile
    decompresses bzip2 and LZMA without a bound."""
    if member.compress_type not in _ZIP_METHODS:
        raise ValueError("it uses a compression method other than stored or deflated")
    if member.file_size > limit:
        raise ValueError(f"it expands to {member.file_size} bytes")
    out = bytearray()
    with archive.open(member) as stream:
        while chunk := stream.read(_ZIP_READ):
            out += chunk
            if len(out) > limit:
                raise ValueError(f"it expands to more than {limit} bytes")
    return bytes(out)


def _is_wellformed_pickle(stream: bytes) -> bool:
    """Whether `stream` starts with one complete pickle; walks the opcodes without executing any."""
    try:
        for opcode, _, _ in pickletools.genops(io.BytesIO(stream)):
            if opcode.name == "STOP":
                return True
    except Exception:  # genops raises assorted errors on garbage; all of them mean "not a pickle"
        return False
    return False


def _read_npy(data: bytes, what: str) -> np.ndarray:
    if not data.startswith(np.lib.format.MAGIC_PREFIX):
        # np.load would unpickle such bytes if allowed to; a pickle here is refused as such, anything else is garbage.
        if data.startswith(_PICKLE_PROTO):
            raise _unsafe(what)
        raise _unreadable(what, "no .npy header")
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = read_header(stream)
    except Exception as exc:
        raise _unreadable(what, exc) from None
    if dtype.hasobject:  # object arrays are stored as a pickle
        raise _unsafe(what)
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:
        raise _unreadable(what, exc) from None
    if not isinstance(array, np.ndarray):
        raise _unreadable(what, "not a single array")
    return array


def _read_npz(data: bytes) -> np.ndarray:
    # Read with zipfile and hand the one member to the .npy reader, so .npz gets exactly the same refusals as .npy.
    if not data.startswith(_ZIP_MAGIC):
        if data.startswith(_PICKLE_PROTO):
            raise _unsafe("the .npz file")
        raise _unreadable("the .npz file", "not a zip archive")
    what = "the .npz file"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [i for i in archive.infolist() if not i.is_dir()]
            if len(members) != 1:
                raise _contents("the .npz file", f"found {len(members)} arrays")
            (member,) = members
            what = f"the .npz member {excerpt(member.filename)!r}"
            payload = read_zip_member(archive, member)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise _unreadable(what, exc) from None
    return _read_npy(payload, what)


def _read_safetensors(data: bytes) -> np.ndarray:
    what = "the .safetensors file"
    if len(data) < 8:
        raise _unreadable(what, "shorter than its 8-byte header length")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(_MAX_SAFETENSORS_HEADER, len(data) - 8):
        raise _unreadable(what, f"header length {header_len} exceeds the file or {_MAX_SAFETENSORS_HEADER} bytes")
    try:
        header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _unreadable(what, f"bad JSON header: {exc}") from None
    if not isinstance(header, dict):
        raise _unreadable(what, "the header is not a JSON object")
    tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
    if len(tensors) != 1:
        raise _contents(what, f"found {len(tensors)} tensors")
    ((name, entry),) = tensors.items()
    dtype, shape, offsets = _safetensors_entry(name, entry)
    if dtype not in _SAFETENSORS_FLOATS:
        raise InvalidInput(
            f"voice pack holds {dtype} values; a pack must be floating point (F32, F16, BF16 or F64)",
            code="pack_dtype",
            detail={"found": dtype},
        )
    numpy_dtype = np.dtype(_SAFETENSORS_FLOATS[dtype])
    begin, end = offsets
    buffer_len = len(data) - 8 - header_len
    count = math.prod(shape)
    if not 0 <= begin <= end <= buffer_len or end - begin != count * numpy_dtype.itemsize:
        raise _unreadable(
            what, f"tensor {name!r} data_offsets {offsets} do not fit shape {shape} in a {buffer_len}-byte buffer"
        )
    raw = np.frombuffer(data, dtype=numpy_dtype, count=count, offset=8 + header_len + begin).reshape(shape)
    if dtype == "BF16":  # bfloat16 is the top half of a float32
        return (raw.astype("<u4") << 16).view("<f4")
    return raw


def _safetensors_entry(name: str, entry: Any) -> tuple[str, list[int], list[int]]:
    """The (dtype, shape, data_offsets) of one header entry, checked for type."""

    def ints(value: Any, length: int | None = None) -> bool:
        return (
            isinstance(value, list)
            and (length is None or len(value) == length)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        )

    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("dtype"), str)
        and ints(entry.get("shape"))
        and ints(entry.get("data_offsets"), 2)
    ):
        raise _unreadable("the .safetensors file", f"tensor {name!r} has a malformed header entry")
    return entry["dtype"], entry["shape"], entry["data_offsets"]


# --- blends ----------------------------------------------------------------------------------------------------


def _split_blend(formula: str) -> list[str]:
    """Split on `+` outside parentheses, so a weight such as `1e+1` stays whole; parts come back stripped."""
    parts: list[str] = []
    current: list[str] = []
    in_weight = False
    for char in formula:
        if char == "+" and not in_weight:
            parts.append("".join(current).strip())
            current = []
            continue
        if char == "(":
            in_weight = True
        elif char == ")":
            in_weight = False
        current.append(char)
    parts.append("".join(current).strip())
    return parts


def _parse_blend_part(text: str, index: int) -> BlendPart:
    if not text:
        _blend_error(text, index, "empty part (two '+' in a row, or a '+' at either end)")
    if "(" not in text and ")" not in text:
        name, weight = text, 1.0
    else:
        match = _BLEND_WEIGHTED.fullmatch(text)
        if match is None or not _BLEND_NUMBER.fullmatch(match["weight"].strip()):
            _blend_error(text, index, "write a weighted part as name(number), e.g. af_bella(2)")
        name, weight = match["name"], float(match["weight"])
    if not _BLEND_NAME.fullmatch(name):
        _blend_error(text, index, "a voice name is 1-64 letters, digits, '_', '.' or '-'")
    if not math.isfinite(weight) or weight <= 0:
        _blend_error(text, index, "a weight must be a finite number above 0")
    return BlendPart(name, weight)


def _blend_error(part: str, index: int, why: str) -> NoReturn:
    # Numbered from 0, as `detail.index` is; a long part is quoted by its start only.
    shown = excerpt(part, _MAX_QUOTED_PART)
    raise InvalidInput(
        f"invalid blend part at index {index} '{shown}': {why}",
        code="invalid_blend",
        detail={"part": shown, "index": index},
    )


def _normalised(parts: Sequence[BlendPart]) -> list[BlendPart]:
    # Scale by the largest weight first so that huge weights cannot overflow the sum to inf.
    largest = max(p.weight for p in parts)
    scaled = [p.weight / largest for p in parts]
    total = math.fsum(scaled)
    return [BlendPart(p.name, w / total) for p, w in zip(parts, scaled)]
