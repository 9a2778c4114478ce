"""Unit tests of the voice registry: real WAV/FLAC bytes, real folders under tmp_path."""

from __future__ import annotations

import errno
import io
import json
import logging
import multiprocessing
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from engines import FAMILIES
from errors import Conflict, InsufficientStorage, InvalidInput, NotFound, PayloadTooLarge, ServiceError
from tests.support.voices import npy
from voicebank import bundles, voice_store
from voicebank.ids import check_voice_id, compute_voice_id, is_voice_id
from voicebank.registration import Registration
from voicebank.registry import VoiceRegistry
from voicebank.voice_entry import VoiceEntry

SR = 16_000


def make_audio(seconds: float = 1.0, *, tweak: int = 0, fmt: str = "WAV", sr: int = SR) -> bytes:
    """A 220 Hz sine; `tweak` changes the first sample so clips differ by one sample (and so by id)."""
    t = np.arange(int(seconds * sr)) / sr
    samples = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    if tweak and samples.size:
        samples[0] = tweak / 100
    out = io.BytesIO()
    sf.write(out, samples, sr, format=fmt, subtype="PCM_16")
    return out.getvalue()


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under root with its mtime and content, to prove that nothing was touched."""
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "voices"


@pytest.fixture
def reg(root: Path) -> VoiceRegistry:
    return VoiceRegistry(root)


# -- register / get / list / delete ---------------------------------------------------------------------------------


def test_register_writes_folder_and_get_list_delete(reg: VoiceRegistry, root: Path) -> None:
    audio = make_audio()
    entry, created = reg.register(Registration(audio=audio, engine="voxcpm", ref_text="  hello there  "))
    assert created
    assert entry.voice_id == compute_voice_id(audio, "voxcpm")
    assert entry.ref_text == "hello there"
    assert entry.sample_rate == SR and entry.duration_s == pytest.approx(1.0)
    assert not entry.has_seed_audio and entry.seed_path is None
    assert sorted(os.listdir(root / entry.voice_id)) == ["meta.json", "voice.wav"]
    assert entry.audio_path.read_bytes() == audio  # a WAV upload is stored verbatim
    meta = json.loads((entry.folder / "meta.json").read_text(encoding="utf-8"))
    assert meta == {
        "voice_id": entry.voice_id,
        "engine": "voxcpm",
        "ref_text": "hello there",
        "x_vector_only_mode": False,
        "seed_text": None,
        "created_at": entry.created_at,
        "duration_s": entry.duration_s,
        "sample_rate": SR,
    }
    assert reg.get(entry.voice_id) == entry
    assert reg.list() == [entry]
    assert len(reg) == 1
    assert reg.engines_in_use() == {"voxcpm": 1}

    assert reg.delete(entry.voice_id) == entry
    assert os.listdir(root) == []
    assert len(reg) == 0
    with pytest.raises(NotFound) as exc:
        reg.get(entry.voice_id)
    assert exc.value.code == "voice_not_found"
    with pytest.raises(NotFound):
        reg.delete(entry.voice_id)


def test_get_and_delete_check_the_id_first(reg: VoiceRegistry) -> None:
    for call in (reg.get, reg.delete):
        with pytest.raises(InvalidInput) as exc:
            call("../etc")
        assert exc.value.code == "invalid_voice_id"


def test_register_with_seed(reg: VoiceRegistry) -> None:
    audio, seed = make_audio(), make_audio(2.0, tweak=3)
    entry, created = reg.register(
        Registration(audio=audio, engine="voxcpm", ref_text="hi", seed_audio=seed, seed_text="你好")
    )
    assert created
    assert entry.voice_id == compute_voice_id(audio, "voxcpm", seed_audio=seed, seed_text="你好")
    assert entry.has_seed_audio and entry.seed_text == "你好"
    assert entry.seed_path is not None and entry.seed_path.read_bytes() == seed
    public = entry.public()
    assert set(public) == {
        "voice_id",
        "engine",
        "ref_text",
        "x_vector_only_mode",
        "seed_text",
        "has_seed_audio",
        "created_at",
        "duration_s",
        "sample_rate",
        "kind",
        "language",
    }
    json.dumps(public)


def test_x_vector_only_needs_no_ref_text(reg: VoiceRegistry) -> None:
    audio = make_audio()
    entry, created = reg.register(Registration(audio=audio, engine="qwen", x_vector_only_mode=True))
    assert created and entry.x_vector_only_mode and entry.ref_text == ""
    assert entry.voice_id == compute_voice_id(audio, "qwen", x_vector_only_mode=True)


@pytest.mark.parametrize("seed", [{"seed_audio": make_audio(tweak=4), "seed_text": "calm"}, {"seed_text": "calm"}])
def test_qwen_takes_no_tone_seed(reg: VoiceRegistry, root: Path, seed: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as exc:
        reg.register(Registration(audio=make_audio(), engine="qwen", ref_text="hello", **seed))
    assert exc.value.code == "seed_not_supported" and "qwen" in exc.value.message
    assert os.listdir(root) == [] and len(reg) == 0


def test_same_registration_twice_is_deduped_without_writing(reg: VoiceRegistry, root: Path) -> None:
    registration = Registration(audio=make_audio(), engine="voxcpm", ref_text="hello")
    first, created = reg.register(registration)
    before = snapshot(root)
    again, created_again = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text=" hello "))
    assert created and not created_again
    assert again == first
    assert snapshot(root) == before
    assert sorted(os.listdir(root)) == [first.voice_id]


def test_clips_differing_by_one_sample_get_different_ids(reg: VoiceRegistry) -> None:
    a, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="x"))
    b, _ = reg.register(Registration(audio=make_audio(tweak=1), engine="voxcpm", ref_text="x"))
    assert a.voice_id != b.voice_id
    assert len(reg) == 2


def test_different_ref_text_conflicts_and_changes_nothing(reg: VoiceRegistry, root: Path) -> None:
    first, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    before = snapshot(root)
    with pytest.raises(Conflict) as exc:
        reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="goodbye"))
    assert exc.value.code == "voice_exists"
    assert "replace=true" in exc.value.message
    assert snapshot(root) == before
    assert reg.get(first.voice_id).ref_text == "hello"


def test_replace_updates_ref_text(reg: VoiceRegistry, root: Path) -> None:
    first, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    (first.folder / "prompts").mkdir()  # a per-voice cache made from the old transcript goes with it
    entry, created = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="goodbye", replace=True))
    assert created and entry.voice_id == first.voice_id
    assert reg.get(first.voice_id).ref_text == "goodbye"
    assert sorted(os.listdir(root)) == [first.voice_id]
    assert sorted(os.listdir(root / first.voice_id)) == ["meta.json", "voice.wav"]
    assert VoiceRegistry(root).get(first.voice_id).ref_text == "goodbye"


def test_concurrent_identical_registrations_create_once(reg: VoiceRegistry, root: Path) -> None:
    registration = Registration(audio=make_audio(), engine="voxcpm", ref_text="hello")
    results: list[bool] = []

    def worker() -> None:
        results.append(reg.register(registration)[1])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert len(os.listdir(root)) == 1


# -- validation: every refusal leaves nothing on disk ---------------------------------------------------------------

CASES: list[tuple[str, dict[str, Any], type[ServiceError], str]] = [
    ("unknown engine", {"engine": "nope"}, InvalidInput, "unknown_engine"),
    ("kokoro", {"engine": "kokoro"}, InvalidInput, "engine_cannot_clone"),
    ("audio too large", {"audio": make_audio(3.0)}, PayloadTooLarge, "audio_too_large"),
    ("seed too large", {"seed_audio": make_audio(3.0)}, PayloadTooLarge, "audio_too_large"),
    ("garbage audio", {"audio": b"not audio at all"}, InvalidInput, "invalid_audio"),
    ("garbage seed", {"seed_audio": b"RIFF....WAVE"}, InvalidInput, "invalid_audio"),
    ("empty audio", {"audio": make_audio(0.0)}, InvalidInput, "empty_audio"),
    ("empty seed", {"seed_audio": make_audio(0.0)}, InvalidInput, "empty_audio"),
    ("too short", {"audio": make_audio(0.2)}, InvalidInput, "audio_duration"),
    ("too long", {"audio": make_audio(2.5)}, InvalidInput, "audio_duration"),
    ("seed too short", {"seed_audio": make_audio(0.1)}, InvalidInput, "audio_duration"),
    ("no ref_text", {"ref_text": ""}, InvalidInput, "ref_text_required"),
    ("blank ref_text", {"ref_text": " \n\t "}, InvalidInput, "ref_text_required"),
    ("seed_text alone", {"seed_text": "你好"}, InvalidInput, "seed_text_without_audio"),
    ("ref_text too long", {"ref_text": "a" * 2001}, InvalidInput, "ref_text_too_long"),
]


@pytest.mark.parametrize(("fields", "kind", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusals_leave_nothing_on_disk(
    root: Path, fields: dict[str, Any], kind: type[ServiceError], code: str
) -> None:
    # 3 s of 16-bit mono at 16 kHz is 96 kB: over this bound, while the 2.5 s clip is under it.
    reg = VoiceRegistry(root, max_upload_bytes=90_000, max_seconds=2.0)
    registration = Registration(**{"audio": make_audio(), "engine": "voxcpm", "ref_text": "hello", **fields})
    with pytest.raises(kind) as exc:
        reg.register(registration)
    assert exc.value.code == code
    assert os.listdir(root) == []
    assert len(reg) == 0


def test_refusal_messages_say_what_to_do(root: Path) -> None:
    reg = VoiceRegistry(root, max_seconds=2.0)
    with pytest.raises(InvalidInput) as exc:
        reg.register(Registration(audio=make_audio(), engine="nope", ref_text="x"))
    assert all(name in exc.value.message for name in ("kokoro", "voxcpm", "qwen"))
    with pytest.raises(InvalidInput) as exc:
        reg.register(Registration(audio=make_audio(), engine="kokoro", ref_text="x"))
    assert "cannot clone" in exc.value.message
    assert FAMILIES["kokoro"].accepts_instead in exc.value.message
    with pytest.raises(InvalidInput) as exc:
        reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="x", seed_audio=b"junk"))
    assert "seed_audio" in exc.value.message
    # libsndfile's reason, not the in-memory file's repr ("<_io.BytesIO object at 0x...>") its message opens with
    assert exc.value.message == "seed_audio is not a readable audio file: Format not recognised."
    with pytest.raises(InvalidInput) as exc:
        reg.register(Registration(audio=make_audio(3.0), engine="voxcpm", ref_text="x"))
    assert "between 0.5 and 2 seconds" in exc.value.message and "3.000 s" in exc.value.message


def test_flac_upload_is_stored_as_wav(reg: VoiceRegistry) -> None:
    flac = make_audio(fmt="FLAC")
    entry, _ = reg.register(Registration(audio=flac, engine="voxcpm", ref_text="hello"))
    assert entry.voice_id == compute_voice_id(flac, "voxcpm")  # the id hashes the upload, not the stored file
    info = sf.info(str(entry.audio_path))
    assert info.format == "WAV" and info.subtype == "PCM_16"
    assert info.frames == SR and info.samplerate == SR
    stored, _ = sf.read(str(entry.audio_path), dtype="int16")
    original, _ = sf.read(io.BytesIO(flac), dtype="int16")
    assert np.array_equal(stored, original)


# -- atomicity ------------------------------------------------------------------------------------------------------


def _fail_writing_meta(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(path: Path, obj: Any) -> None:
        path.write_bytes(b"{half")  # a torn write, then the failure
        raise OSError("disk full")

    monkeypatch.setattr(voice_store, "_write_json", boom)


def test_failure_mid_registration_leaves_no_half_voice(
    reg: VoiceRegistry, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fail_writing_meta(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    assert os.listdir(root) == []
    assert len(reg) == 0
    monkeypatch.undo()
    entry, created = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    assert created and os.listdir(root) == [entry.voice_id]


def test_failure_mid_replace_keeps_the_old_voice(
    reg: VoiceRegistry, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    before = snapshot(root)
    _fail_writing_meta(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="goodbye", replace=True))
    assert os.listdir(root) == [old.voice_id]
    assert snapshot(root) == before
    assert reg.get(old.voice_id).ref_text == "hello"
    assert VoiceRegistry(root).get(old.voice_id).ref_text == "hello"


def test_failure_between_the_renames_of_a_replace_puts_the_old_voice_back(
    reg: VoiceRegistry, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    before = snapshot(root)
    real_rename = os.rename

    def rename(src: Any, dst: Any) -> None:
        if Path(src).name.startswith(".tmp-"):
            raise OSError("rename failed")
        real_rename(src, dst)

    monkeypatch.setattr(voice_store.os, "rename", rename)
    with pytest.raises(OSError, match="rename failed"):
        reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="goodbye", replace=True))
    monkeypatch.undo()
    assert os.listdir(root) == [old.voice_id]
    assert snapshot(root) == before
    assert reg.get(old.voice_id).ref_text == "hello"


# -- loading --------------------------------------------------------------------------------------------------------


def test_restart_keeps_every_voice(reg: VoiceRegistry, root: Path) -> None:
    entries = [
        reg.register(Registration(audio=make_audio(tweak=1), engine="voxcpm", ref_text="one"))[0],
        reg.register(Registration(audio=make_audio(tweak=2), engine="qwen", x_vector_only_mode=True))[0],
        reg.register(
            Registration(
                audio=make_audio(tweak=3), engine="voxcpm", ref_text="three", seed_audio=make_audio(), seed_text="s"
            )
        )[0],
    ]
    fresh = VoiceRegistry(root)
    assert fresh.list() == reg.list()
    assert sorted(e.voice_id for e in fresh.list()) == sorted(e.voice_id for e in entries)
    assert fresh.engines_in_use() == {"voxcpm": 2, "qwen": 1}


def _voice_folder(root: Path, voice_id: str, meta: Any | None, *, audio: bool = True) -> Path:
    folder = root / voice_id
    folder.mkdir(parents=True)
    if audio:
        (folder / "voice.wav").write_bytes(make_audio(1.5, sr=24_000))
    if meta is not None:
        text = meta if isinstance(meta, str) else json.dumps(meta)
        (folder / "meta.json").write_text(text, encoding="utf-8")
    return folder


def test_legacy_folder_loads_with_defaults(root: Path) -> None:
    folder = _voice_folder(root, "00112233aabbccdd", {"engine": "voxcpm", "text": "hi"})
    entry = VoiceRegistry(root).get("00112233aabbccdd")
    assert entry.engine == "voxcpm" and entry.ref_text == "hi"
    assert not entry.x_vector_only_mode and entry.seed_text is None and not entry.has_seed_audio
    assert entry.sample_rate == 24_000 and entry.duration_s == pytest.approx(1.5)
    assert entry.created_at == folder.stat().st_mtime
    assert entry.folder == folder


def test_list_is_ordered_by_created_at_then_id(root: Path) -> None:
    _voice_folder(root, "ffffffffffffffff", {"engine": "voxcpm", "created_at": 1.0})
    _voice_folder(root, "bbbbbbbbbbbbbbbb", {"engine": "voxcpm", "created_at": 2.0})
    _voice_folder(root, "aaaaaaaaaaaaaaaa", {"engine": "voxcpm", "created_at": 2.0})
    ids = [e.voice_id for e in VoiceRegistry(root).list()]
    assert ids == ["ffffffffffffffff", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]


@pytest.mark.parametrize(
    ("meta", "audio"),
    [
        ("{not json", True),
        ("[1, 2]", True),
        ({"ref_text": "no engine"}, True),
        ({"engine": "voxcpm", "created_at": "yesterday"}, True),
        (None, True),
        ({"engine": "voxcpm", "ref_text": "no clip"}, False),
    ],
    ids=["bad json", "not an object", "no engine", "bad field", "no meta", "no voice.wav"],
)
def test_broken_folders_are_skipped_with_a_warning_and_kept(
    root: Path, caplog: pytest.LogCaptureFixture, meta: Any, audio: bool
) -> None:
    good = _voice_folder(root, "1111111111111111", {"engine": "voxcpm", "ref_text": "fine"})
    broken = _voice_folder(root, "2222222222222222", meta, audio=audio)
    before = snapshot(root)
    with caplog.at_level(logging.WARNING, logger="polytts.registry"):
        reg = VoiceRegistry(root)
    assert [e.voice_id for e in reg.list()] == [good.name]
    assert any(broken.name in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert snapshot(root) == before


def test_voice_of_an_unknown_engine_is_listed(root: Path) -> None:
    _voice_folder(root, "3333333333333333", {"engine": "mystery", "ref_text": "?"})
    reg = VoiceRegistry(root)
    assert [e.engine for e in reg.list()] == ["mystery"]
    assert reg.engines_in_use() == {"mystery": 1}


def test_other_names_are_ignored(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    (root / ".DS_Store").parent.mkdir(parents=True)
    (root / ".DS_Store").write_bytes(b"")
    (root / "README.txt").write_text("notes")
    with caplog.at_level(logging.DEBUG, logger="polytts.registry"):
        reg = VoiceRegistry(root)
    assert len(reg) == 0
    assert not any(".DS_Store" in r.getMessage() for r in caplog.records)
    assert sorted(os.listdir(root)) == [".DS_Store", "README.txt"]


def test_leftovers_are_cleaned_and_an_interrupted_replace_is_restored(root: Path) -> None:
    kept = _voice_folder(root, "4444444444444444", {"engine": "voxcpm", "ref_text": "kept"})
    orphan = _voice_folder(root, "5555555555555555", {"engine": "voxcpm", "ref_text": "orphan"})
    orphan.rename(root / ".trash-5555555555555555-x")
    stale = root / ".trash-4444444444444444-y"  # the replace finished: its id folder exists
    shutil.copytree(kept, stale)
    unfinished = root / ".tmp-6666666666666666-z"
    _voice_folder(root, "6666666666666666", {"engine": "voxcpm"}).rename(unfinished)
    an_hour_ago = time.time() - 3601
    os.utime(unfinished, (an_hour_ago, an_hour_ago))
    _voice_folder(root, "7777777777777777", {"engine": "voxcpm"}).rename(root / ".trash-deleted-7777777777777777-w")

    reg = VoiceRegistry(root)
    assert sorted(os.listdir(root)) == ["4444444444444444", "5555555555555555"]
    assert reg.get("5555555555555555").ref_text == "orphan"
    assert reg.get("4444444444444444").ref_text == "kept"


def test_a_fresh_unfinished_registration_is_left_to_the_node_writing_it(root: Path) -> None:
    """In a voices folder shared by several nodes, a young `.tmp-` folder may be another node's write under way."""
    _voice_folder(root, "6666666666666666", {"engine": "voxcpm"}).rename(root / ".tmp-6666666666666666-z")
    assert len(VoiceRegistry(root)) == 0
    assert os.listdir(root) == [".tmp-6666666666666666-z"]


def _import_stalled(root: str, bundle: bytes, writing: Any) -> None:
    """Import a bundle in this process and stall between the voice's files and its meta.json (written last), as a
    node that is killed there would stop."""

    def stall(*_: object) -> None:
        writing.set()
        threading.Event().wait()

    voice_store._write_json = stall  # type: ignore[assignment]  # this process's own copy
    VoiceRegistry(Path(root)).register(bundles.registration(bundle, 1 << 24))


def test_a_bundle_import_killed_mid_write_is_swept_at_the_next_start(reg: VoiceRegistry, root: Path) -> None:
    """A `.tmp-` folder is left alone while the process writing it runs (even one of this host); once it has died, the
    next start removes it at once instead of an hour later."""
    entry, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    bundle = bundles.export(entry)
    reg.delete(entry.voice_id)
    context = multiprocessing.get_context("fork") if sys.platform == "linux" else multiprocessing.get_context("spawn")
    writing = context.Event()
    importer = context.Process(target=_import_stalled, args=(str(root), bundle, writing), daemon=True)
    importer.start()
    try:
        assert writing.wait(60)
        (unfinished,) = [name for name in os.listdir(root) if name.startswith(".tmp-")]
        assert len(VoiceRegistry(root)) == 0 and unfinished in os.listdir(root)  # another process's write under way
    finally:
        importer.kill()
        importer.join(30)
    assert unfinished in os.listdir(root)
    assert len(VoiceRegistry(root)) == 0
    assert not [name for name in os.listdir(root) if name.startswith(".tmp-")]


def test_delete_is_not_undone_by_a_restart(reg: VoiceRegistry, root: Path) -> None:
    entry, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    reg.delete(entry.voice_id)
    assert len(VoiceRegistry(root)) == 0


# --- Kokoro voice packs ---------------------------------------------------------------------------------------


def _pack_bytes(pack: np.ndarray, suffix: str) -> bytes:
    buffer = io.BytesIO()
    if suffix == ".npy":
        np.save(buffer, pack)
    else:
        np.savez(buffer, voice=pack)
    return buffer.getvalue()


def test_register_a_voice_pack(reg: VoiceRegistry, root: Path) -> None:
    from engines.kokoro.voicepacks import pack_id

    pack = np.random.default_rng(1).standard_normal((510, 1, 256)).astype(np.float32)
    entry, created = reg.register(
        Registration(audio=b"", engine="kokoro", voice_pack=_pack_bytes(pack, ".npy"), voice_pack_filename="v.npy")
    )
    assert created and entry.kind == "pack" and entry.voice_id == pack_id(pack)
    assert entry.pack_path is not None and np.array_equal(np.load(entry.pack_path), pack)
    assert sorted(os.listdir(root / entry.voice_id)) == ["meta.json", "voice_pack.npy"]
    # The same tensor in another format is the same voice: nothing is written again.
    again, created = reg.register(
        Registration(audio=b"", engine="kokoro", voice_pack=_pack_bytes(pack, ".npz"), voice_pack_filename="v.npz")
    )
    assert not created and again.voice_id == entry.voice_id
    reloaded = VoiceRegistry(root).get(entry.voice_id)
    assert reloaded.kind == "pack" and reloaded.engine == "kokoro" and reloaded.pack_path == entry.pack_path


@pytest.mark.parametrize(
    ("registration", "code"),
    [
        (
            Registration(audio=b"", engine="voxcpm", voice_pack=b"x", voice_pack_filename="v.npy"),
            "engine_takes_no_pack",
        ),
        (Registration(audio=b"", engine="nope", voice_pack=b"x", voice_pack_filename="v.npy"), "unknown_engine"),
        (Registration(audio=b"RIFF", engine="kokoro", voice_pack=b"x", voice_pack_filename="v.npy"), "audio_and_pack"),
        (
            Registration(
                audio=b"",
                engine="kokoro",
                voice_pack=_pack_bytes(np.zeros((510, 256), np.float32), ".npy"),
                voice_pack_filename="v.npy",
            ),
            "pack_shape",
        ),
        (Registration(audio=b"", engine="kokoro", voice_pack=b"junk", voice_pack_filename="v.wav"), "pack_format"),
    ],
)
def test_voice_pack_refusals_leave_nothing(
    reg: VoiceRegistry, root: Path, registration: Registration, code: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        reg.register(registration)
    assert err.value.code == code
    assert os.listdir(root) == []


def test_a_seed_clip_needs_its_text(reg: VoiceRegistry, root: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        reg.register(
            Registration(audio=make_audio(), engine="voxcpm", ref_text="hi", seed_audio=make_audio(1.0, tweak=5))
        )
    assert err.value.code == "seed_text_required"
    assert os.listdir(root) == []


def test_an_unknown_engine_with_a_pack_is_called_unknown(reg: VoiceRegistry) -> None:
    with pytest.raises(InvalidInput) as err:
        reg.register(Registration(audio=b"", engine="nope", voice_pack=b"x", voice_pack_filename="v.npy"))
    assert err.value.message.startswith("unknown engine 'nope'") and "kokoro" in err.value.message


@pytest.mark.parametrize("bad", ["0123456789abcdef\n", "0123456789abcdef\r\n", "\n0123456789abcdef"])
def test_an_id_with_a_newline_is_not_an_id(reg: VoiceRegistry, bad: str) -> None:
    assert not is_voice_id(bad)
    for call in (check_voice_id, reg.get, reg.lookup, reg.delete):
        with pytest.raises(InvalidInput) as exc:
            call(bad)
        assert exc.value.code == "invalid_voice_id"


# -- damaged folders: each is skipped with one warning, left alone, and never stops the registry ---------------------

GOOD_CLIP_META = {"engine": "voxcpm", "ref_text": "fine", "duration_s": 1.5, "sample_rate": 24_000}


def _write_pack_folder(root: Path, voice_id: str, meta: Any, pack_file: bytes) -> Path:
    folder = root / voice_id
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(meta if isinstance(meta, str) else json.dumps(meta), encoding="utf-8")
    (folder / "voice_pack.npy").write_bytes(pack_file)
    return folder


def _npy_header(shape: tuple[int, ...]) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return out.getvalue()


GOOD_PACK = npy(np.zeros((510, 1, 256), np.float32))
NESTED_JSON = "[" * 100_000 + "]" * 100_000

DAMAGED_CLIP_META: list[tuple[str, Any]] = [
    ("created_at not a number", {**GOOD_CLIP_META, "created_at": "yesterday"}),
    ("created_at infinite", '{"engine": "voxcpm", "ref_text": "x", "created_at": 1e999}'),
    ("created_at NaN", '{"engine": "voxcpm", "ref_text": "x", "created_at": NaN}'),
    ("created_at huge", {**GOOD_CLIP_META, "created_at": 1e300}),
    ("created_at huge int", {**GOOD_CLIP_META, "created_at": 10**400}),
    ("created_at negative", {**GOOD_CLIP_META, "created_at": -5}),
    ("created_at a bool", {**GOOD_CLIP_META, "created_at": True}),
    ("duration_s a string", {**GOOD_CLIP_META, "duration_s": "1.5"}),
    ("sample_rate a list", {**GOOD_CLIP_META, "sample_rate": [24_000]}),
    ("x_vector_only_mode a string", {**GOOD_CLIP_META, "x_vector_only_mode": "yes"}),
    ("ref_text a list", {**GOOD_CLIP_META, "ref_text": ["a"]}),
    ("seed_text a number", {**GOOD_CLIP_META, "seed_text": 5}),
    ("engine a number", {**GOOD_CLIP_META, "engine": 5}),
    ("engine a path", {**GOOD_CLIP_META, "engine": "../x"}),
    ("engine huge", {**GOOD_CLIP_META, "engine": "e" * 100_000}),
    ("unknown kind", {**GOOD_CLIP_META, "kind": "hologram"}),
    ("another voice's meta", {**GOOD_CLIP_META, "voice_id": "ffffffffffffffff"}),
    ("meta too large", {**GOOD_CLIP_META, "ref_text": "x" * (2 * 1024 * 1024)}),
    ("deeply nested", NESTED_JSON),
    ("not UTF-8", "\udcff"),
    ("duration disagrees with the clip", {**GOOD_CLIP_META, "duration_s": 3.0}),
    ("rate disagrees with the clip", {**GOOD_CLIP_META, "sample_rate": 16_000}),
]


def _clip_folder(root: Path, meta: Any) -> Path:
    folder = root / "2222222222222222"
    folder.mkdir(parents=True)
    (folder / "voice.wav").write_bytes(make_audio(1.5, sr=24_000))
    raw = meta.encode("utf-8", "surrogateescape") if isinstance(meta, str) else json.dumps(meta).encode()
    (folder / "meta.json").write_bytes(raw)
    return folder


def _assert_skipped_once(root: Path, caplog: pytest.LogCaptureFixture, broken: str) -> VoiceRegistry:
    good = _voice_folder(root, "1111111111111111", GOOD_CLIP_META)
    before = snapshot(root)
    with caplog.at_level(logging.WARNING, logger="polytts.registry"):
        reg = VoiceRegistry(root)
        with pytest.raises(ServiceError) as exc:  # asked for again: the same answer, not a second warning
            reg.lookup(broken)
    assert exc.value.code == "voice_damaged" and exc.value.status == 500
    assert [e.voice_id for e in reg.list()] == [good.name]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and broken in warnings[0].getMessage(), [r.getMessage() for r in warnings]
    assert all(r.exc_info is None for r in caplog.records)
    assert snapshot(root) == before
    return reg


@pytest.mark.parametrize("meta", [c[1] for c in DAMAGED_CLIP_META], ids=[c[0] for c in DAMAGED_CLIP_META])
def test_a_damaged_meta_json_skips_that_voice_only(root: Path, caplog: pytest.LogCaptureFixture, meta: Any) -> None:
    _clip_folder(root, meta)
    _assert_skipped_once(root, caplog, "2222222222222222")


def _fifo(path: Path) -> None:
    """Replace the file at `path` by a FIFO (a read of it would block)."""
    path.unlink()
    os.mkfifo(path)


DAMAGED_FILES: list[tuple[str, Any]] = [
    ("voice.wav random bytes", lambda f: (f / "voice.wav").write_bytes(os.urandom(4000))),
    ("voice.wav emptied", lambda f: (f / "voice.wav").write_bytes(b"")),
    ("voice.wav cut short", lambda f: (f / "voice.wav").write_bytes((f / "voice.wav").read_bytes()[:30_000])),
    ("voice.wav only a header", lambda f: (f / "voice.wav").write_bytes((f / "voice.wav").read_bytes()[:44])),
    ("voice.wav a folder", lambda f: ((f / "voice.wav").unlink(), (f / "voice.wav").mkdir())),
    ("voice.wav a FIFO", lambda f: _fifo(f / "voice.wav")),
    ("seed.wav garbage", lambda f: (f / "seed.wav").write_bytes(b"RIFF....WAVEfmt ")),
    ("meta.json a folder", lambda f: ((f / "meta.json").unlink(), (f / "meta.json").mkdir())),
]


@pytest.mark.parametrize("damage", [c[1] for c in DAMAGED_FILES], ids=[c[0] for c in DAMAGED_FILES])
def test_a_damaged_clip_skips_that_voice_only(root: Path, caplog: pytest.LogCaptureFixture, damage: Any) -> None:
    damage(_clip_folder(root, GOOD_CLIP_META))
    _assert_skipped_once(root, caplog, "2222222222222222")


PACK_META = {"engine": "kokoro", "kind": "pack", "created_at": 1.0}
DAMAGED_PACKS: list[tuple[str, Any, bytes]] = [
    ("created_at not a number", {**PACK_META, "created_at": "yesterday"}, GOOD_PACK),
    ("created_at huge", {**PACK_META, "created_at": 1e300}, GOOD_PACK),
    ("no engine", {"kind": "pack"}, GOOD_PACK),
    ("random bytes", PACK_META, os.urandom(1000)),
    ("emptied", PACK_META, b""),
    ("cut short", PACK_META, GOOD_PACK[:-100]),
    ("longer than its header says", PACK_META, GOOD_PACK + b"\0" * 64),
    ("wrong shape", PACK_META, npy(np.zeros((510, 256), np.float32))),
    ("integers", PACK_META, npy(np.zeros((510, 1, 256), np.int32))),
    ("pickled objects", PACK_META, npy(np.array([{"a": 1}], dtype=object), allow_pickle=True)),
    ("header claims a huge shape", PACK_META, _npy_header((510, 1, 10**12)) + GOOD_PACK[128:]),
    ("header not a literal", PACK_META, GOOD_PACK.replace(b"(510, 1, 256)", b"(510, 1, 2**8)")),
]


@pytest.mark.parametrize(("meta", "pack_file"), [c[1:] for c in DAMAGED_PACKS], ids=[c[0] for c in DAMAGED_PACKS])
def test_a_damaged_pack_skips_that_voice_only(
    root: Path, caplog: pytest.LogCaptureFixture, meta: Any, pack_file: bytes
) -> None:
    _write_pack_folder(root, "2222222222222222", meta, pack_file)
    _assert_skipped_once(root, caplog, "2222222222222222")


def test_a_damaged_clip_folder_is_overwritten_by_replace(root: Path) -> None:
    audio = make_audio()
    voice_id = compute_voice_id(audio, "voxcpm")
    folder = _voice_folder(root, voice_id, {"engine": "voxcpm", "created_at": "yesterday"})
    reg = VoiceRegistry(root)
    with pytest.raises(Conflict) as exc:
        reg.register(Registration(audio=audio, engine="voxcpm", ref_text="hello"))
    assert "could not be loaded" in exc.value.message
    entry, created = reg.register(Registration(audio=audio, engine="voxcpm", ref_text="hello", replace=True))
    assert created and entry.folder == folder and reg.lookup(voice_id).ref_text == "hello"


def test_registering_a_damaged_pack_again_rewrites_it(reg: VoiceRegistry, root: Path) -> None:
    pack = np.random.default_rng(3).standard_normal((510, 1, 256)).astype(np.float32)
    upload = Registration(audio=b"", engine="kokoro", voice_pack=npy(pack), voice_pack_filename="v.npy")
    entry, _ = reg.register(upload)
    assert entry.pack_path is not None
    entry.pack_path.write_bytes(GOOD_PACK)  # whole and well-formed, but no longer this voice's values
    again, created = reg.register(upload)
    assert created and again.pack_path is not None and np.array_equal(np.load(again.pack_path), pack)
    # A folder skipped at start-up is rewritten the same way.
    entry.pack_path.write_bytes(b"junk")
    fresh = VoiceRegistry(root)
    assert len(fresh) == 0
    assert fresh.register(upload)[1] and len(fresh) == 1


# -- a full disk -----------------------------------------------------------------------------------------------------


def test_no_space_left_is_a_507_and_leaves_nothing(
    reg: VoiceRegistry, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = voice_store.write_synced

    def write(path: Path, data: bytes) -> None:
        real_write(path, data[: len(data) // 2])  # half written, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(voice_store, "write_synced", write)
    with pytest.raises(InsufficientStorage) as exc:
        reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    assert exc.value.status == 507 and exc.value.code == "insufficient_storage"
    assert "no space left" in exc.value.message and "nothing was stored" in exc.value.message
    assert os.listdir(root) == [] and len(reg) == 0
    monkeypatch.undo()
    old, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    monkeypatch.setattr(voice_store, "write_synced", write)
    before = snapshot(root)
    with pytest.raises(InsufficientStorage):  # a replace that runs out of space keeps the old voice
        reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="other", replace=True))
    assert snapshot(root) == before and reg.lookup(old.voice_id).ref_text == "hello"


def test_a_really_full_disk_is_a_507_and_leaves_nothing(small_disk: Path) -> None:
    reg = VoiceRegistry(small_disk / "voices", max_upload_bytes=4 * 1024 * 1024, max_seconds=120)
    with pytest.raises(InsufficientStorage):
        reg.register(Registration(audio=make_audio(70.0), engine="voxcpm", ref_text="too big for the disk"))
    assert os.listdir(small_disk / "voices") == []
    entry, created = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="fits"))
    assert created and os.listdir(small_disk / "voices") == [entry.voice_id]


# -- several nodes on one voices folder ------------------------------------------------------------------------------


def test_lookup_finds_replaces_and_forgets_what_another_node_did(root: Path) -> None:
    here, there = VoiceRegistry(root), VoiceRegistry(root)
    entry, _ = there.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    with pytest.raises(NotFound):
        here.get(entry.voice_id)  # the index alone does not know it
    assert here.lookup(entry.voice_id) == entry
    assert here.get(entry.voice_id) == entry  # now indexed
    there.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="goodbye", replace=True))
    assert here.lookup(entry.voice_id).ref_text == "goodbye"
    there.delete(entry.voice_id)
    with pytest.raises(NotFound) as exc:
        here.lookup(entry.voice_id)
    assert exc.value.code == "voice_not_found" and len(here) == 0
    with pytest.raises(NotFound):
        here.lookup("0123456789abcdef")


def test_lookup_of_a_folder_damaged_after_start(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    reg = VoiceRegistry(root)
    entry, _ = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text="hello"))
    (entry.folder / "meta.json").write_text('{"engine": "voxcpm", "created_at": "soon"}')
    with caplog.at_level(logging.WARNING, logger="polytts.registry"):
        for _ in range(3):
            with pytest.raises(ServiceError) as exc:
                reg.lookup(entry.voice_id)
            assert exc.value.code == "voice_damaged"
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert len(reg) == 0


def _race(root: Path, registrations: list[Registration]) -> list[tuple[VoiceEntry | None, bool | ServiceError]]:
    """Each registration through its own registry on `root`, all held at a barrier once their folder is written,
    so every one of them reaches the final rename together: the worst interleaving two nodes can produce."""
    registries = [VoiceRegistry(root) for _ in registrations]
    barrier = threading.Barrier(len(registrations), timeout=30)
    real_fsync_dir = voice_store.fsync_dir

    def fsync_dir(path: Path) -> None:
        real_fsync_dir(path)
        if path.name.startswith(".tmp-"):
            barrier.wait()

    results: list[tuple[VoiceEntry | None, bool | ServiceError]] = [(None, False)] * len(registrations)

    def run(i: int) -> None:
        try:
            results[i] = registries[i].register(registrations[i])
        except ServiceError as exc:
            results[i] = (None, exc)

    original = voice_store.fsync_dir
    voice_store.fsync_dir = fsync_dir
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(registrations))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        voice_store.fsync_dir = original
    return results


def test_racing_identical_registrations_end_with_one_voice(root: Path) -> None:
    registration = Registration(audio=make_audio(), engine="voxcpm", ref_text="hello")
    results = _race(root, [registration, registration, registration])
    assert sorted(created for _, created in results if isinstance(created, bool)) == [False, False, True]
    ids = {entry.voice_id for entry, _ in results if entry is not None}
    assert len(ids) == 1
    assert os.listdir(root) == list(ids)
    assert VoiceRegistry(root).list()[0].ref_text == "hello"


def test_racing_registrations_with_different_transcripts(root: Path) -> None:
    audio = make_audio()
    results = _race(
        root,
        [
            Registration(audio=audio, engine="voxcpm", ref_text="one"),
            Registration(audio=audio, engine="voxcpm", ref_text="two"),
        ],
    )
    created = [entry for entry, outcome in results if outcome is True and entry is not None]
    refused = [outcome for _, outcome in results if isinstance(outcome, ServiceError)]
    assert len(created) == 1 and len(refused) == 1 and refused[0].code == "voice_exists"
    assert os.listdir(root) == [created[0].voice_id]
    assert VoiceRegistry(root).list()[0].ref_text == created[0].ref_text


def test_racing_pack_registrations_end_with_one_pack(root: Path) -> None:
    pack = np.random.default_rng(4).standard_normal((510, 1, 256)).astype(np.float32)
    upload = Registration(audio=b"", engine="kokoro", voice_pack=npy(pack), voice_pack_filename="v.npy")
    results = _race(root, [upload, upload])
    assert sorted(created for _, created in results if isinstance(created, bool)) == [False, True]
    (name,) = os.listdir(root)
    assert np.array_equal(np.load(root / name / "voice_pack.npy"), pack)


def _register_in_a_process(root: str, start: Any, ref_text: str) -> tuple[str, bool]:
    reg = VoiceRegistry(Path(root))
    start.wait()
    entry, created = reg.register(Registration(audio=make_audio(), engine="voxcpm", ref_text=ref_text))
    return entry.voice_id, created


@pytest.mark.slow
def test_processes_registering_one_voice_at_once(root: Path) -> None:
    """Real processes, as nodes sharing a voices folder are: however they interleave, one voice, created once."""
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with context.Manager() as manager, context.Pool(4) as pool:
        start = manager.Barrier(4)
        results = pool.starmap(_register_in_a_process, [(str(root), start, "hello")] * 4)
    assert sorted(created for _, created in results) == [False, False, False, True]
    assert len({voice_id for voice_id, _ in results}) == 1
    assert os.listdir(root) == [results[0][0]]
    assert VoiceRegistry(root).lookup(results[0][0]).ref_text == "hello"
