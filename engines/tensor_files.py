"""One tensor read from an untrusted file, without running any code the file carries.

`.pt` files are pickles, so they are only ever opened with torch's weights-only unpickler, and the records of their
zip form are checked against a size cap first; `.npy`/`.npz` are opened with `allow_pickle=False`; `.safetensors` is
parsed here, without any library, so a node without torch still reads it. Zip members (`.npz`, the zip form of
`.pt`, the files of a voice bundle) are decompressed under a cap on the bytes that actually come out, whatever
their headers claim. A refused file is a `TensorFileError` saying why; the caller words it for its clients.
"""

from __future__ import annotations

import io
import json
import logging
import math
import pickle
import pickletools
import struct
import zipfile
from typing import Any

import numpy as np

from voicebank.voice_entry import excerpt

log = logging.getLogger("polytts.tensor_files")

TENSOR_SUFFIXES = (".pt", ".npy", ".npz", ".safetensors")

# Methods whose reads zipfile bounds by the bytes asked for; it decompresses bzip2 and LZMA chunks without a bound.
_ZIP_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
_ZIP_READ = 64 * 1024
_MAX_SAFETENSORS_HEADER = 1024 * 1024
_PICKLE_PROTO = b"\x80"  # every pickle of protocol 2 or later starts with the PROTO opcode
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")

# safetensors float dtypes -> how their bytes are read; BF16 is read as raw uint16 and widened by hand.
_SAFETENSORS_FLOATS = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "BF16": "<u2"}


class TensorFileError(Exception):
    """Why a tensor file is refused: `what` names the file or member read (`the .npz member 'v.npy'`), `why` what
    is wrong with it."""

    def __init__(self, what: str, why: object = "") -> None:
        super().__init__(f"{what}: {why}" if why else what)
        self.what = what
        self.why = why


class Unreadable(TensorFileError):
    """Not a well-formed file of its format, or one that would expand past the cap."""


class Unsafe(TensorFileError):
    """It holds pickled code or objects other than tensors: refused without running it."""


class NotOneTensor(TensorFileError):
    """A readable container that does not hold exactly one tensor."""


class NeedsTorch(TensorFileError):
    """A `.pt` file, on a node without torch."""


class NotFloat(TensorFileError):
    """A tensor of integers or booleans where the format's reader converts floating point only: `found` is its dtype
    as the format names it, `floats` the float dtypes the format has, when it names them itself."""

    def __init__(self, what: str, found: str, floats: str = "") -> None:
        super().__init__(what, f"holds {found} values")
        self.found = found
        self.floats = floats


def read_tensor(data: bytes, suffix: str, max_bytes: int) -> np.ndarray:
    """The one tensor in `data`, a file of the format `suffix` names (one of TENSOR_SUFFIXES); what a container
    holds may expand to at most `max_bytes` (the largest tensor the caller takes, with its header)."""
    if suffix == ".pt":
        return _read_pt(data, max_bytes)
    if suffix == ".npy":
        return _read_npy(data, "the .npy file")
    if suffix == ".npz":
        return _read_npz(data, max_bytes)
    if suffix == ".safetensors":
        return _read_safetensors(data)
    raise ValueError(f"{suffix!r} is not one of {', '.join(TENSOR_SUFFIXES)}")


def read_zip_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, limit: int) -> bytes:
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


# --- .pt ------------------------------------------------------------------------------------------------------------


def _read_pt(data: bytes, max_bytes: int) -> np.ndarray:
    try:
        import torch  # lazily: nodes serving only ONNX do not install it
    except ImportError:
        raise NeedsTorch("the .pt file") from None
    if data.startswith(_ZIP_MAGIC):
        # A .pt archive holds the pickle, the tensor's storage and a few small records.
        _check_pt_archive(data, 2 * max_bytes)
    try:
        loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        # The weights-only unpickler says UnpicklingError both for a pickle it refuses and for bytes that are no
        # pickle at all; only a stream that is a well-formed pickle was refused for what it holds.
        if isinstance(exc, pickle.UnpicklingError) and _is_wellformed_pickle(_pt_pickle_stream(data, max_bytes)):
            log.warning("refused a .pt file holding objects other than tensors: %s", str(exc).splitlines()[0])
            raise Unsafe("the .pt file") from None
        raise Unreadable("the .pt file", type(exc).__name__) from None
    if isinstance(loaded, dict):
        if len(loaded) != 1:
            raise NotOneTensor("the .pt file", f"found a dict of {len(loaded)} entries")
        (loaded,) = loaded.values()
    if not isinstance(loaded, torch.Tensor):
        raise NotOneTensor("the .pt file", f"found {type(loaded).__name__}")
    if loaded.layout != torch.strided:
        raise NotOneTensor("the .pt file", f"found a {loaded.layout} tensor")
    if not loaded.is_floating_point():
        raise NotFloat("the .pt file", str(loaded.dtype).removeprefix("torch."))
    return loaded.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


def _check_pt_archive(data: bytes, limit: int) -> None:
    """Refuse a .pt archive before torch reads it when its records could expand past `limit`: torch allocates what a
    record's header claims and inflates it, so every claim is checked here, with the compression methods."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise Unreadable("the .pt file", exc) from None
    if any(m.compress_type not in _ZIP_METHODS for m in members):
        raise Unreadable("the .pt file", "it uses a compression method other than stored or deflated")
    claimed = sum(m.file_size for m in members)
    if claimed > limit:
        raise Unreadable("the .pt file", f"its records expand to {claimed} bytes")


def _pt_pickle_stream(data: bytes, max_bytes: int) -> bytes:
    """The pickle torch reads first: `<archive>/data.pkl` of the zip format, else the file itself (legacy format)."""
    if not data.startswith(_ZIP_MAGIC):
        return data
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = next((i for i in archive.infolist() if i.filename.endswith("data.pkl")), None)
            return b"" if info is None else read_zip_member(archive, info, max_bytes)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        return b""


def _is_wellformed_pickle(stream: bytes) -> bool:
    """Whether `stream` starts with one complete pickle; walks the opcodes without executing any."""
    try:
        for opcode, _, _ in pickletools.genops(io.BytesIO(stream)):
            if opcode.name == "STOP":
                return True
    except Exception:  # genops raises assorted errors on garbage; all of them mean "not a pickle"
        return False
    return False


# --- .npy and .npz ----------------------------------------------------------------------------------------------------


def _read_npy(data: bytes, what: str) -> np.ndarray:
    if not data.startswith(np.lib.format.MAGIC_PREFIX):
        # np.load would unpickle such bytes if allowed to; a pickle here is refused as such, anything else is garbage.
        if data.startswith(_PICKLE_PROTO):
            raise Unsafe(what)
        raise Unreadable(what, "no .npy header")
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = read_header(stream)
    except Exception as exc:
        raise Unreadable(what, exc) from None
    if dtype.hasobject:  # object arrays are stored as a pickle
        raise Unsafe(what)
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:
        raise Unreadable(what, exc) from None
    if not isinstance(array, np.ndarray):
        raise Unreadable(what, "not a single array")
    return array


def _read_npz(data: bytes, max_bytes: int) -> np.ndarray:
    # Read with zipfile and hand the one member to the .npy reader, so .npz gets exactly the same refusals as .npy.
    if not data.startswith(_ZIP_MAGIC):
        if data.startswith(_PICKLE_PROTO):
            raise Unsafe("the .npz file")
        raise Unreadable("the .npz file", "not a zip archive")
    what = "the .npz file"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [i for i in archive.infolist() if not i.is_dir()]
            if len(members) != 1:
                raise NotOneTensor("the .npz file", f"found {len(members)} arrays")
            (member,) = members
            what = f"the .npz member {excerpt(member.filename)!r}"
            payload = read_zip_member(archive, member, max_bytes)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise Unreadable(what, exc) from None
    return _read_npy(payload, what)


# --- .safetensors -----------------------------------------------------------------------------------------------------


def _read_safetensors(data: bytes) -> np.ndarray:
    what = "the .safetensors file"
    if len(data) < 8:
        raise Unreadable(what, "shorter than its 8-byte header length")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(_MAX_SAFETENSORS_HEADER, len(data) - 8):
        raise Unreadable(what, f"header length {header_len} exceeds the file or {_MAX_SAFETENSORS_HEADER} bytes")
    try:
        header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Unreadable(what, f"bad JSON header: {exc}") from None
    if not isinstance(header, dict):
        raise Unreadable(what, "the header is not a JSON object")
    tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
    if len(tensors) != 1:
        raise NotOneTensor(what, f"found {len(tensors)} tensors")
    ((name, entry),) = tensors.items()
    dtype, shape, offsets = _safetensors_entry(name, entry)
    if dtype not in _SAFETENSORS_FLOATS:
        raise NotFloat(what, dtype, "F32, F16, BF16 or F64")
    numpy_dtype = np.dtype(_SAFETENSORS_FLOATS[dtype])
    begin, end = offsets
    buffer_len = len(data) - 8 - header_len
    count = math.prod(shape)
    if not 0 <= begin <= end <= buffer_len or end - begin != count * numpy_dtype.itemsize:
        raise Unreadable(
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
        raise Unreadable("the .safetensors file", f"tensor {name!r} has a malformed header entry")
    return entry["dtype"], entry["shape"], entry["data_offsets"]
