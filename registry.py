"""The content-hashed voice registry on disk.

One folder per voice, `<root>/<voice_id>/{voice.wav, meta.json, seed.wav?}`, the layout earlier deployments wrote, so a
copied voices folder loads as is. The id is a hash of what was registered, so the same registration gives the same id
on every node. Every write goes to a temporary folder that is renamed into place: a crash or a failed write leaves no
half voice, and a replace never loses the voice it replaces.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from engines import FAMILIES, EngineFamily
from engines.voicepacks import pack_id, read_pack
from errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from voice_entry import AUDIO_FILE, META_FILE, PACK_FILE, SEED_FILE, VoiceEntry

log = logging.getLogger("polytts.registry")

VOICE_ID_RE = re.compile(r"^[0-9a-f]{16}$")

MAX_REF_TEXT_CHARS = 2000

_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
# Deleted voices go to a trash name that does not parse as `.trash-<id>-`, so a crash mid-delete never resurrects them.
_DELETED_TRASH_PREFIX = ".trash-deleted-"
# Uploads libsndfile reads as a WAV file are kept byte for byte; anything else is re-encoded.
_WAV_FORMATS = frozenset({"WAV", "WAVEX"})


def compute_voice_id(
    audio: bytes,
    engine: str,
    x_vector_only_mode: bool = False,
    seed_audio: bytes | None = None,
    seed_text: str | None = None,
) -> str:
    """The id existing clients hold: it must stay byte-for-byte the same hash on every node."""
    h = hashlib.sha256()
    h.update(audio)
    h.update(b"|" + engine.encode("utf-8"))
    if x_vector_only_mode:
        h.update(b"|xvec")
    if seed_audio is not None:
        h.update(b"|seed:" + hashlib.sha256(seed_audio).digest())
    if seed_text:
        h.update(b"|st:" + seed_text.encode("utf-8"))
    return h.hexdigest()[:16]


def check_voice_id(voice_id: str) -> str:
    """Refuse anything but a 16-digit lowercase hex id, so an id can never name a path outside the registry."""
    if not VOICE_ID_RE.match(voice_id):
        raise InvalidInput(
            f"voice_id must be 16 lowercase hex digits, got {voice_id[:40]!r}", code="invalid_voice_id"
        )
    return voice_id


@dataclass(frozen=True)
class Registration:
    """What `POST /voices` carries, already read into memory: a reference clip, or a voice pack for Kokoro."""

    audio: bytes = field(repr=False)
    engine: str
    ref_text: str = ""
    x_vector_only_mode: bool = False
    seed_audio: bytes | None = field(default=None, repr=False)
    seed_text: str | None = None
    replace: bool = False
    voice_pack: bytes | None = field(default=None, repr=False)
    voice_pack_filename: str = ""


@dataclass(frozen=True)
class _Clip:
    """A validated upload: the bytes to store as a WAV file and what was measured."""

    wav: bytes = field(repr=False)
    duration_s: float
    sample_rate: int


class VoiceRegistry:
    def __init__(
        self,
        root: Path,
        *,
        families: Mapping[str, EngineFamily] = FAMILIES,
        max_upload_bytes: int = 12_582_912,
        min_seconds: float = 0.5,
        max_seconds: float = 60.0,
    ) -> None:
        self.root = Path(root)
        self.families = families
        self.max_upload_bytes = max_upload_bytes
        self.min_seconds = min_seconds
        self.max_seconds = max_seconds
        # Serialises writers; readers take the current index without it because writers swap in a new dict.
        self._lock = threading.Lock()
        self.root.mkdir(parents=True, exist_ok=True)
        self._clean_leftovers()
        self._index: dict[str, VoiceEntry] = self._load_all()
        log.info("loaded %d voice(s) from %s", len(self._index), self.root)

    # -- reading -------------------------------------------------------------------------------------------------

    def get(self, voice_id: str) -> VoiceEntry:
        entry = self._index.get(check_voice_id(voice_id))
        if entry is None:
            raise NotFound(f"no voice {voice_id} is registered on this node", code="voice_not_found")
        return entry

    def list(self) -> list[VoiceEntry]:
        return sorted(self._index.values(), key=lambda e: (e.created_at, e.voice_id))

    def __len__(self) -> int:
        return len(self._index)

    def engines_in_use(self) -> dict[str, int]:
        return dict(Counter(e.engine for e in self._index.values()))

    # -- writing -------------------------------------------------------------------------------------------------

    def register(self, reg: Registration) -> tuple[VoiceEntry, bool]:
        """Validate everything in memory first, then write atomically. Returns (entry, created)."""
        if reg.voice_pack is not None:
            return self._register_pack(reg)
        self._check_engine(reg.engine)
        if (reg.seed_audio is not None or reg.seed_text) and not self.families[reg.engine].takes_seed:
            raise InvalidInput(
                f"engine {reg.engine!r} cannot take a tone seed (seed_audio, seed_text); register the voice from its "
                "clip and transcript alone",
                code="seed_not_supported",
            )
        self._check_size("audio", reg.audio)
        if reg.seed_audio is not None:
            self._check_size("seed_audio", reg.seed_audio)
        clip = self._decode("audio", reg.audio)
        seed = self._decode("seed_audio", reg.seed_audio) if reg.seed_audio is not None else None
        ref_text = reg.ref_text.strip()
        if not reg.x_vector_only_mode and not ref_text:
            raise InvalidInput(
                "ref_text (the transcript of the clip) is required unless x_vector_only_mode is on: "
                "a continuation prompt needs it",
                code="ref_text_required",
            )
        if reg.seed_text and reg.seed_audio is None:
            raise InvalidInput("seed_text was given without seed_audio", code="seed_text_without_audio")
        if reg.seed_audio is not None and not (reg.seed_text or "").strip():
            raise InvalidInput(
                "seed_audio needs its seed_text: the seed is a continuation prompt, which needs its transcript",
                code="seed_text_required",
            )
        if len(ref_text) > MAX_REF_TEXT_CHARS:
            raise InvalidInput(
                f"ref_text is {len(ref_text)} characters; at most {MAX_REF_TEXT_CHARS} are allowed",
                code="ref_text_too_long",
            )
        seed_text = reg.seed_text or None
        voice_id = compute_voice_id(reg.audio, reg.engine, reg.x_vector_only_mode, reg.seed_audio, seed_text)

        with self._lock:
            dest = self.root / voice_id
            existing = self._index.get(voice_id)
            if existing is not None and existing.ref_text.strip() == ref_text:
                return existing, False
            if dest.exists() and not reg.replace:
                if existing is None:
                    raise Conflict(
                        f"a folder for voice {voice_id} exists but could not be loaded; "
                        "pass replace=true to overwrite it",
                        code="voice_exists",
                    )
                raise Conflict(
                    f"voice {voice_id} is already registered with a different ref_text; "
                    "pass replace=true to replace it",
                    code="voice_exists",
                )
            meta = {
                "voice_id": voice_id,
                "engine": reg.engine,
                "ref_text": ref_text,
                "x_vector_only_mode": reg.x_vector_only_mode,
                "seed_text": seed_text,
                "created_at": time.time(),
                "duration_s": clip.duration_s,
                "sample_rate": clip.sample_rate,
            }
            files = {AUDIO_FILE: clip.wav, **({SEED_FILE: seed.wav} if seed is not None else {})}
            replaced = self._install(voice_id, files, meta)
            entry = VoiceEntry(
                voice_id=voice_id,
                engine=reg.engine,
                ref_text=ref_text,
                x_vector_only_mode=reg.x_vector_only_mode,
                seed_text=seed_text,
                has_seed_audio=seed is not None,
                created_at=meta["created_at"],
                duration_s=clip.duration_s,
                sample_rate=clip.sample_rate,
                folder=dest,
            )
            self._index = {**self._index, voice_id: entry}
        log.info("%s voice %s (engine %s)", "replaced" if replaced else "registered", voice_id, reg.engine)
        return entry, True

    def _register_pack(self, reg: Registration) -> tuple[VoiceEntry, bool]:
        """A Kokoro style pack: validated without running any pickle, stored as a plain .npy, id from its values."""
        assert reg.voice_pack is not None
        family = self.families.get(reg.engine)
        if family is None or not family.accepts_packs:
            raise InvalidInput(
                f"engine {reg.engine!r} takes no voice_pack; "
                + ("it clones from an 'audio' clip" if family else f"known engines: {', '.join(sorted(self.families))}"),
                code="engine_takes_no_pack" if family else "unknown_engine",
            )
        if reg.audio:
            raise InvalidInput("give either an 'audio' clip or a 'voice_pack', not both", code="audio_and_pack")
        self._check_size("voice_pack", reg.voice_pack)
        pack = read_pack(reg.voice_pack, reg.voice_pack_filename)
        voice_id = pack_id(pack)
        buffer = io.BytesIO()
        np.save(buffer, pack, allow_pickle=False)
        with self._lock:
            existing = self._index.get(voice_id)
            if existing is not None:
                return existing, False
            if (self.root / voice_id).exists():
                raise Conflict(
                    f"a folder for voice {voice_id} exists but could not be loaded; remove it by hand",
                    code="voice_exists",
                )
            meta = {"voice_id": voice_id, "engine": reg.engine, "kind": "pack", "created_at": time.time()}
            self._install(voice_id, {PACK_FILE: buffer.getvalue()}, meta)
            entry = _pack_entry(self.root / voice_id, meta)
            self._index = {**self._index, voice_id: entry}
        log.info("registered voice pack %s (engine %s)", voice_id, reg.engine)
        return entry, True

    def delete(self, voice_id: str) -> VoiceEntry:
        with self._lock:
            entry = self.get(voice_id)  # checks the id's form before it can name a path
            trash = self.root / f"{_DELETED_TRASH_PREFIX}{voice_id}-{uuid.uuid4().hex}"
            os.rename(entry.folder, trash)
            self._index = {k: v for k, v in self._index.items() if k != voice_id}
            _fsync_dir(self.root)
            _remove_quietly(trash)
        log.info("deleted voice %s", voice_id)
        return entry

    # -- validation ----------------------------------------------------------------------------------------------

    def _check_engine(self, engine: str) -> None:
        family = self.families.get(engine)
        if family is None:
            known = ", ".join(sorted(self.families))
            raise InvalidInput(f"unknown engine {engine!r}; known engines: {known}", code="unknown_engine")
        if not family.clones_from_clip:
            raise InvalidInput(
                f"engine {engine!r} cannot clone a voice from a clip; it takes {family.accepts_instead}",
                code="engine_cannot_clone",
            )

    def _check_size(self, name: str, data: bytes) -> None:
        if len(data) > self.max_upload_bytes:
            raise PayloadTooLarge(
                f"{name} is {len(data)} bytes; at most {self.max_upload_bytes} are accepted", code="audio_too_large"
            )

    def _decode(self, name: str, data: bytes) -> _Clip:
        """Decode fully (a header alone can lie), check the duration, and produce the WAV bytes to store."""
        try:
            with sf.SoundFile(io.BytesIO(data)) as f:
                fmt = f.format
                samples = f.read(dtype="float32", always_2d=True)
                sample_rate = f.samplerate
        except (sf.SoundFileError, RuntimeError, ValueError) as exc:
            raise InvalidInput(f"{name} is not a readable audio file: {exc}", code="invalid_audio") from exc
        frames = samples.shape[0]
        if frames == 0:
            raise InvalidInput(f"{name} holds no audio frames", code="empty_audio")
        duration = frames / sample_rate
        if not self.min_seconds <= duration <= self.max_seconds:
            raise InvalidInput(
                f"{name} must last between {self.min_seconds:g} and {self.max_seconds:g} seconds; "
                f"it lasts {duration:.3f} s",
                code="audio_duration",
            )
        if fmt in _WAV_FORMATS:
            wav = data
        else:
            out = io.BytesIO()
            sf.write(out, samples, sample_rate, format="WAV", subtype="PCM_16")
            wav = out.getvalue()
        return _Clip(wav=wav, duration_s=duration, sample_rate=sample_rate)

    # -- atomic writes -------------------------------------------------------------------------------------------

    def _install(self, voice_id: str, files: Mapping[str, bytes], meta: dict[str, Any]) -> bool:
        """Write a complete folder beside the registry, then rename it in. Returns whether a voice was replaced."""
        dest = self.root / voice_id
        tmp = self.root / f"{_TMP_PREFIX}{voice_id}-{uuid.uuid4().hex}"
        trash: Path | None = None
        try:
            tmp.mkdir()
            for name, data in files.items():
                _write_bytes(tmp / name, data)
            _write_json(tmp / META_FILE, meta)  # last: a folder with meta.json is a finished one
            _fsync_dir(tmp)
            if dest.exists():
                trash = self.root / f"{_TRASH_PREFIX}{voice_id}-{uuid.uuid4().hex}"
                os.rename(dest, trash)
            os.rename(tmp, dest)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if trash is not None and trash.exists() and not dest.exists():
                os.rename(trash, dest)
            raise
        if trash is not None:
            _remove_quietly(trash)
        return trash is not None

    # -- loading -------------------------------------------------------------------------------------------------

    def _clean_leftovers(self) -> None:
        """Finish what a crash interrupted: restore a replaced voice whose successor never arrived, drop the rest."""
        for name in sorted(os.listdir(self.root)):
            path = self.root / name
            if name.startswith(_TMP_PREFIX):
                log.info("removing unfinished registration %s", name)
                _remove_quietly(path)
            elif name.startswith(_TRASH_PREFIX):
                voice_id = name[len(_TRASH_PREFIX) : len(_TRASH_PREFIX) + 16]
                orphaned = (
                    VOICE_ID_RE.match(voice_id) is not None
                    and name[len(_TRASH_PREFIX) + 16 : len(_TRASH_PREFIX) + 17] == "-"
                    and not (self.root / voice_id).exists()
                )
                if orphaned:
                    log.warning("restoring voice %s from %s (a replace was interrupted)", voice_id, name)
                    try:
                        os.rename(path, self.root / voice_id)
                    except OSError as exc:
                        log.warning("could not restore %s: %s", name, exc)
                else:
                    log.info("removing leftover %s", name)
                    _remove_quietly(path)

    def _load_all(self) -> dict[str, VoiceEntry]:
        index: dict[str, VoiceEntry] = {}
        for name in sorted(os.listdir(self.root)):
            if not VOICE_ID_RE.match(name):
                if not name.startswith("."):
                    log.info("ignoring %s in %s: not a voice id", name, self.root)
                continue
            entry = _load_entry(self.root / name)
            if entry is not None:
                index[name] = entry
        return index


def _load_entry(folder: Path) -> VoiceEntry | None:
    """Read one voice folder tolerantly; None (with a warning, leaving the folder alone) when it is unusable."""
    if not folder.is_dir():
        log.warning("skipping %s: not a folder", folder)
        return None
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("skipping voice folder %s: unreadable %s (%s)", folder, META_FILE, exc)
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("engine"), str) or not meta["engine"]:
        log.warning("skipping voice folder %s: %s names no engine", folder, META_FILE)
        return None
    if meta.get("kind") == "pack":
        if not (folder / PACK_FILE).is_file():
            log.warning("skipping voice folder %s: no %s", folder, PACK_FILE)
            return None
        return _pack_entry(folder, meta)
    audio_path = folder / AUDIO_FILE
    if not audio_path.is_file():
        log.warning("skipping voice folder %s: no %s", folder, AUDIO_FILE)
        return None
    try:
        if "duration_s" in meta and "sample_rate" in meta:
            duration_s, sample_rate = float(meta["duration_s"]), int(meta["sample_rate"])
        else:
            info = sf.info(str(audio_path))
            duration_s, sample_rate = info.frames / info.samplerate, info.samplerate
        ref_text = meta.get("ref_text", meta.get("text"))
        seed_text = meta.get("seed_text")
        return VoiceEntry(
            voice_id=folder.name,
            engine=meta["engine"],
            ref_text="" if ref_text is None else str(ref_text),
            x_vector_only_mode=bool(meta.get("x_vector_only_mode", False)),
            seed_text=None if seed_text is None else str(seed_text),
            has_seed_audio=(folder / SEED_FILE).is_file(),
            created_at=float(meta["created_at"]) if "created_at" in meta else folder.stat().st_mtime,
            duration_s=duration_s,
            sample_rate=sample_rate,
            folder=folder,
        )
    except (OSError, RuntimeError, TypeError, ValueError) as exc:
        log.warning("skipping voice folder %s: %s", folder, exc)
        return None


def _pack_entry(folder: Path, meta: Mapping[str, Any]) -> VoiceEntry:
    return VoiceEntry(
        voice_id=folder.name,
        engine=str(meta["engine"]),
        ref_text="",
        x_vector_only_mode=False,
        seed_text=None,
        has_seed_audio=False,
        created_at=float(meta.get("created_at", folder.stat().st_mtime)),
        duration_s=0.0,
        sample_rate=0,
        folder=folder,
        kind="pack",
    )


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_json(path: Path, obj: Mapping[str, Any]) -> None:
    _write_bytes(path, json.dumps(obj, ensure_ascii=False, indent=2).encode("utf-8"))


def _fsync_dir(path: Path) -> None:
    """Make renames inside `path` durable; some platforms cannot open a folder for this, which is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    """Drop a leftover; a failure only leaves litter that the next start removes."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)
