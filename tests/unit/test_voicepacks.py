"""Voice packs: every upload format read from real bytes, every refusal with its code, pickles refused unrun."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import pathlib
import pickle
import struct
import tracemalloc
import zipfile
from collections.abc import Callable

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from engines import tensor_files
from engines.kokoro import voicepacks
from engines.kokoro.voicepacks import PACK_SHAPE, pack_id, read_pack, read_stored_pack, stored_pack_problem
from errors import InvalidInput, ServiceError
from tests.support.voices import npy


def random_pack(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(PACK_SHAPE).astype(np.float32)


def as_pt(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def as_npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub gives every keyword the type of allow_pickle
    return buffer.getvalue()


def as_safetensors(array: np.ndarray) -> bytes:
    return safetensors.numpy.save({"voice": array})


def handmade_safetensors(header: dict[str, object], buffer: bytes) -> bytes:
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + buffer


SERIALISERS: dict[str, Callable[[np.ndarray], bytes]] = {
    "pack.pt": lambda a: as_pt(torch.from_numpy(a)),
    "pack.npy": npy,
    "pack.npz": lambda a: as_npz(voice=a),
    "pack.safetensors": as_safetensors,
}


def refused(data: bytes, filename: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        read_pack(data, filename)
    assert caught.value.status == 422
    return caught.value


# --- formats ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("filename", list(SERIALISERS))
def test_each_format_round_trips(filename: str) -> None:
    pack = random_pack()
    read = read_pack(SERIALISERS[filename](pack), filename)
    assert read.dtype == np.float32 and read.shape == PACK_SHAPE and read.flags.c_contiguous
    np.testing.assert_array_equal(read, pack)


def test_suffix_is_case_insensitive_and_pt_dict_of_one_tensor_is_accepted() -> None:
    pack = random_pack()
    np.testing.assert_array_equal(read_pack(npy(pack), "Voice.NPY"), pack)
    np.testing.assert_array_equal(read_pack(as_pt({"voice": torch.from_numpy(pack)}), "v.pt"), pack)


def test_safetensors_half_precisions_are_widened() -> None:
    pack = random_pack()
    f16 = read_pack(as_safetensors(pack.astype(np.float16)), "v.safetensors")
    bf16 = read_pack(safetensors.torch.save({"voice": torch.from_numpy(pack).bfloat16()}), "v.safetensors")
    assert f16.dtype == bf16.dtype == np.float32
    np.testing.assert_allclose(f16, pack, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(bf16, pack, rtol=1e-2, atol=1e-2)
    np.testing.assert_array_equal(bf16, torch.from_numpy(pack).bfloat16().float().numpy())


def test_float64_and_big_endian_are_converted() -> None:
    pack = random_pack()
    np.testing.assert_array_equal(read_pack(npy(pack.astype(np.float64)), "v.npy"), pack)
    np.testing.assert_array_equal(read_pack(npy(pack.astype(">f4")), "v.npy"), pack)


def test_pack_id_is_the_same_for_every_format_and_differs_per_tensor() -> None:
    pack = random_pack()
    ids = {pack_id(read_pack(serialise(pack), filename)) for filename, serialise in SERIALISERS.items()}
    assert len(ids) == 1
    assert pack_id(random_pack(1)) not in ids
    (only,) = ids
    assert len(only) == 16 and int(only, 16) >= 0


def test_pack_id_is_pinned() -> None:
    zeros = np.zeros(PACK_SHAPE, np.float32)
    expected = hashlib.sha256(b"\x00" * (510 * 256 * 4) + b"|kokoro-pack").hexdigest()[:16]
    assert pack_id(zeros) == expected


# --- refusals --------------------------------------------------------------------------------------------------


def test_unknown_suffix() -> None:
    error = refused(npy(random_pack()), "pack.bin")
    assert error.code == "pack_format"
    for suffix in (".pt", ".npy", ".npz", ".safetensors"):
        assert suffix in error.message


@pytest.mark.parametrize("filename", list(SERIALISERS))
@pytest.mark.parametrize("shape", [(510, 256), (511, 1, 256), (510, 1, 255)])
def test_wrong_shape(filename: str, shape: tuple[int, ...]) -> None:
    error = refused(SERIALISERS[filename](np.zeros(shape, np.float32)), filename)
    assert error.code == "pack_shape"
    assert str(shape) in error.message and str(PACK_SHAPE) in error.message
    assert error.detail == {"found": list(shape), "expected": list(PACK_SHAPE)}


def test_integer_dtypes() -> None:
    ints = np.zeros(PACK_SHAPE, np.int32)
    error = refused(npy(ints), "v.npy")
    assert error.code == "pack_dtype" and "int32" in error.message
    error = refused(as_safetensors(ints.astype(np.int64)), "v.safetensors")
    assert error.code == "pack_dtype" and "I64" in error.message
    error = refused(as_pt(torch.zeros(PACK_SHAPE, dtype=torch.int64)), "v.pt")
    assert error.code == "pack_dtype" and "int64" in error.message
    error = refused(as_npz(voice=ints.astype(bool)), "v.npz")
    assert error.code == "pack_dtype" and "bool" in error.message


@pytest.mark.parametrize("filename", list(SERIALISERS))
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_values(filename: str, bad: float) -> None:
    pack = random_pack()
    pack[3, 0, 7] = bad
    error = refused(SERIALISERS[filename](pack), filename)
    assert error.code == "pack_values" and error.detail == {"nonfinite": 1}


def test_float64_overflowing_float32_is_refused() -> None:
    pack = random_pack().astype(np.float64)
    pack[0, 0, 0] = 1e300
    assert refused(npy(pack), "v.npy").code == "pack_values"


def test_containers_must_hold_one_tensor() -> None:
    pack = random_pack()
    assert refused(as_npz(a=pack, b=pack), "v.npz").code == "pack_contents"
    assert refused(as_npz(), "v.npz").code == "pack_contents"
    assert refused(safetensors.numpy.save({"a": pack, "b": pack}), "v.safetensors").code == "pack_contents"
    two = {"a": torch.from_numpy(pack), "b": torch.from_numpy(pack)}
    assert refused(as_pt(two), "v.pt").code == "pack_contents"
    assert refused(as_pt([torch.from_numpy(pack)]), "v.pt").code == "pack_contents"


@pytest.mark.parametrize("filename", list(SERIALISERS))
def test_truncated_and_garbage_bytes(filename: str) -> None:
    whole = SERIALISERS[filename](random_pack())
    for data in (whole[: len(whole) // 2], whole[:20], b"", b"definitely not a voice pack " * 10):
        assert refused(data, filename).code in ("pack_unreadable", "pack_unsafe")
    assert refused(b"definitely not a voice pack " * 10, filename).code == "pack_unreadable"


def test_safetensors_header_length_beyond_the_file() -> None:
    whole = as_safetensors(random_pack())
    error = refused(struct.pack("<Q", len(whole)) + whole[8:], "v.safetensors")
    assert error.code == "pack_unreadable"
    assert refused(struct.pack("<Q", 2**63) + whole[8:], "v.safetensors").code == "pack_unreadable"


def test_safetensors_data_offsets_outside_the_buffer() -> None:
    size = math.prod(PACK_SHAPE) * 4
    buffer = random_pack().tobytes()

    def entry(begin: int, end: int) -> dict[str, object]:
        return {"voice": {"dtype": "F32", "shape": list(PACK_SHAPE), "data_offsets": [begin, end]}}

    np.testing.assert_array_equal(
        read_pack(handmade_safetensors({"__metadata__": {"k": "v"}, **entry(0, size)}, buffer), "v.safetensors"),
        np.frombuffer(buffer, np.float32).reshape(PACK_SHAPE),
    )
    for begin, end in [(4, size + 4), (0, size + 4), (size, 0), (0, size - 4)]:
        assert refused(handmade_safetensors(entry(begin, end), buffer), "v.safetensors").code == "pack_unreadable"


def test_safetensors_malformed_header() -> None:
    assert refused(struct.pack("<Q", 5) + b"{nope", "v.safetensors").code == "pack_unreadable"
    assert refused(handmade_safetensors({"voice": {"dtype": "F32"}}, b""), "v.safetensors").code == "pack_unreadable"
    assert refused(handmade_safetensors({"__metadata__": {}}, b""), "v.safetensors").code == "pack_contents"


# --- pickles are refused unrun ---------------------------------------------------------------------------------


class Trap:
    """Unpickling one creates the marker file: proof that pickled code ran."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (pathlib.Path.touch, (self.marker,))


def trap_array(marker: pathlib.Path) -> np.ndarray:
    array = np.empty(1, dtype=object)
    array[0] = Trap(marker)
    return array


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch notes the raw pickle's protocol
@pytest.mark.parametrize(
    ("filename", "payload"),
    [
        ("v.pt", lambda m: as_pt(Trap(m))),
        ("v.pt", lambda m: as_pt({"voice": Trap(m)})),
        ("v.pt", lambda m: pickle.dumps(Trap(m))),
        ("v.npy", lambda m: npy(trap_array(m), allow_pickle=True)),
        ("v.npy", lambda m: pickle.dumps(Trap(m))),
        ("v.npz", lambda m: as_npz(voice=trap_array(m))),
    ],
)
def test_pickled_code_is_refused_without_running(
    tmp_path: pathlib.Path, filename: str, payload: Callable[[pathlib.Path], bytes]
) -> None:
    marker = tmp_path / "pwned"
    data = payload(marker)
    assert not marker.exists()
    error = refused(data, filename)
    assert error.code == "pack_unsafe" and "refused without running it" in error.message
    assert not marker.exists()


# --- archives: the cap is on the bytes decompressed, not on what a header claims ------------------------------------

BOMB_BYTES = 64 * 1024 * 1024


def zip_bomb(member: str, claimed: int | None, *, prefix: bytes = b"", method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip whose one member inflates to BOMB_BYTES (written in pieces, so building it costs no such memory), with
    its size fields rewritten to `claimed` when given, as a hostile client would."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as archive, archive.open(member, "w") as stream:
        stream.write(prefix)
        piece = b"\0" * (1 << 20)
        for _ in range(BOMB_BYTES // len(piece)):
            stream.write(piece)
    data = bytearray(out.getvalue())
    if claimed is not None:
        local = data.index(b"PK\x03\x04")
        central = data.index(b"PK\x01\x02")
        struct.pack_into("<I", data, local + 22, claimed)
        struct.pack_into("<I", data, central + 24, claimed)
    return bytes(data)


def peak_bytes(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        call()
    except InvalidInput:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("claimed", [None, 1000, math.prod(PACK_SHAPE) * 4 + 128])
def test_an_npz_bomb_is_refused_without_inflating_it(claimed: int | None) -> None:
    bomb = zip_bomb("voice.npy", claimed, prefix=npy(random_pack())[:128])
    assert refused(bomb, "v.npz").code == "pack_unreadable"
    assert peak_bytes(lambda: read_pack(bomb, "v.npz")) < 20 * 1024 * 1024


def test_archive_members_compressed_other_than_by_deflate_are_refused() -> None:
    for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=method) as archive:
            archive.writestr("voice.npy", npy(random_pack()))
        assert refused(buffer.getvalue(), "v.npz").code == "pack_unreadable"
        assert "compression method" in refused(buffer.getvalue(), "v.npz").message


@pytest.mark.parametrize("claimed", [None, 1000])
def test_a_pt_bomb_is_refused_without_inflating_it(claimed: int | None) -> None:
    bomb = zip_bomb("archive/data.pkl", claimed, prefix=pickle.dumps({}))
    assert refused(bomb, "v.pt").code == "pack_unreadable"
    assert peak_bytes(lambda: read_pack(bomb, "v.pt")) < 20 * 1024 * 1024
    # The pickle torch refused is read back (to tell refused code from garbage) under the same cap.
    assert peak_bytes(lambda: tensor_files._pt_pickle_stream(bomb, voicepacks._MAX_MEMBER_BYTES)) < 20 * 1024 * 1024
    assert tensor_files._pt_pickle_stream(bomb, voicepacks._MAX_MEMBER_BYTES) == b""


def test_a_pt_archive_stored_with_deflate_still_loads() -> None:
    pack = random_pack()
    plain = zipfile.ZipFile(io.BytesIO(as_pt(torch.from_numpy(pack))))
    deflated = io.BytesIO()
    with zipfile.ZipFile(deflated, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for info in plain.infolist():
            archive.writestr(info.filename, plain.read(info))
    np.testing.assert_array_equal(read_pack(deflated.getvalue(), "v.pt"), pack)


# --- stored packs --------------------------------------------------------------------------------------------------


def stored(tmp_path: pathlib.Path, data: bytes) -> pathlib.Path:
    folder = tmp_path / "0123456789abcdef"
    folder.mkdir(exist_ok=True)
    (folder / "voice_pack.npy").write_bytes(data)
    return folder / "voice_pack.npy"


def test_a_stored_pack_reads_back_checked_against_its_id(tmp_path: pathlib.Path) -> None:
    pack = random_pack(5)
    path = stored(tmp_path, npy(pack))
    assert stored_pack_problem(path) is None
    np.testing.assert_array_equal(read_stored_pack(path, pack_id(pack)), pack)


@pytest.mark.parametrize(
    "data",
    [
        npy(random_pack(6)),  # whole, but another pack's values
        npy(random_pack(5))[:-4],
        b"",
        b"\x93NUMPY garbage",
        npy(np.full(PACK_SHAPE, np.nan, np.float32)),
    ],
    ids=["other values", "cut short", "empty", "bad header", "NaN"],
)
def test_a_damaged_stored_pack_is_the_voices_own_error(
    tmp_path: pathlib.Path, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = stored(tmp_path, data)
    with caplog.at_level(logging.WARNING, logger="polytts.artefacts"):
        for _ in range(3):
            with pytest.raises(ServiceError) as caught:
                read_stored_pack(path, pack_id(random_pack(5)))
            assert caught.value.status == 500 and caught.value.code == "voice_damaged"
            assert "0123456789abcdef" in caught.value.message
    assert len(caplog.records) == 1  # logged once, however often it is asked for
