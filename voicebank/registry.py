"""The content-hashed voice registry on disk.

One folder per voice, `<root>/<voice_id>/{voice.wav, meta.json, seed.wav?}`, the layout earlier deployments wrote, so a
copied voices folder loads as is. The id is a hash of what was registered (`voicebank.ids`), so the same registration
gives the same id on every node. Every write goes to a temporary folder that is renamed into place: a crash or a failed write leaves no
half voice, and a replace never loses the voice it replaces.

Several nodes may share one voices folder (a network file system): the final rename is the only step that decides
which registration of an id wins, so two racing ones end with one intact voice, and an id another node registered is
found on disk (`lookup`). Everything read back is checked first (`meta.json` against `voicebank.meta`, then the files
it names); a damaged folder is skipped with one warning.
"""

from __future__ import annotations

import errno
import io
import logging
import math
import os
import re
import shutil
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from engines import FAMILIES
from engines.base import EngineSpec
from engines.kokoro.voicepacks import pack_id, read_pack, read_stored_pack, stored_pack_problem
from errors import Conflict, InsufficientStorage, InvalidInput, NotFound, PayloadTooLarge, ServiceError
from voicebank.ids import check_voice_id, compute_voice_id, is_voice_id
from voicebank.meta import ClipMeta, PackMeta, Unusable, VoiceMeta, read_meta
from voicebank.voice_entry import (
    AUDIO_FILE,
    META_FILE,
    ORIGINAL_AUDIO_FILE,
    ORIGINAL_SEED_FILE,
    PACK_FILE,
    SEED_FILE,
    VoiceEntry,
    excerpt,
)

log = logging.getLogger("polytts.registry")

MAX_REF_TEXT_CHARS = 2000

_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
# Deleted voices go to a trash name that does not parse as `.trash-<id>-`, so a crash mid-delete never resurrects them.
_DELETED_TRASH_PREFIX = ".trash-deleted-"
# Uploads libsndfile reads as a WAV file are kept byte for byte; anything else is re-encoded.
_WAV_FORMATS = frozenset({"WAV", "WAVEX"})
# Another node may be writing its own `.tmp-` folder in a shared voices folder: only older ones are litter, unless
# the folder's name says that a process of this host wrote it and has ended since (`_abandoned`).
_LEFTOVER_AGE_S = 3600.0
# A temporary folder's name ends with its writer, `<pid>.<run>.<node>`: the run tells this process from an earlier one
# that had the same pid (a restarted container's).
_RUN = uuid.uuid4().hex[:12]
# How far a clip may be from the duration its meta.json records before it counts as cut short or replaced.
_DURATION_SLACK_S = 0.05
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_STAMP = (-1, -1)  # meta.json vanished while it was read: read the folder again next time


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
    language: str | None = None
    """The language the voice speaks (a canonical code): a request that names none follows it."""
    expected_id: str | None = None
    """The id the registration must come out as (an imported bundle's): anything else is refused, nothing written."""


@dataclass(frozen=True)
class _Clip:
    """A validated upload: the bytes to store as a WAV file and what was measured."""

    wav: bytes = field(repr=False)
    duration_s: float
    sample_rate: int
    reencoded: bool
    """The upload was not a WAV file: `wav` is a re-encoding, and the id hashes the upload's own bytes."""


class _IdTaken(Exception):
    """Another registration (maybe another node's) renamed its folder into place first."""


@dataclass(frozen=True)
class _Indexed:
    entry: VoiceEntry
    stamp: tuple[int, int]
    """(inode, mtime) of the folder's meta.json when it was read: a change means another node rewrote the voice."""


class VoiceRegistry:
    def __init__(
        self,
        root: Path,
        *,
        families: Mapping[str, EngineSpec] = FAMILIES,
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
        self._index: dict[str, _Indexed] = {}
        self._reported: set[str] = set()  # damaged folders already logged, so each is logged once
        self.root.mkdir(parents=True, exist_ok=True)
        self._clean_leftovers()
        self._load_all()
        log.info("loaded %d voice(s) from %s", len(self._index), self.root)

    # -- reading -------------------------------------------------------------------------------------------------

    def get(self, voice_id: str) -> VoiceEntry:
        """A voice this node has indexed; no disk access (see `lookup`)."""
        indexed = self._index.get(check_voice_id(voice_id))
        if indexed is None:
            raise NotFound(f"no voice {voice_id} is registered on this node", code="voice_not_found")
        return indexed.entry

    def lookup(self, voice_id: str) -> VoiceEntry:
        """A voice as its folder on disk has it now: indexed voices cost one stat, and a voice that another node
        sharing the voices folder registered, replaced or deleted is read (or forgotten) here. It touches the disk:
        call it off the event loop. A folder that is there but damaged is the voice's `voice_damaged` error."""
        check_voice_id(voice_id)
        indexed = self._index.get(voice_id)
        if indexed is not None and indexed.stamp == _meta_stamp(self.root / voice_id):
            return indexed.entry
        with self._lock:
            entry = self._current(voice_id)
        if entry is None:
            raise NotFound(f"no voice {voice_id} is registered on this node", code="voice_not_found")
        return entry

    def list(self) -> list[VoiceEntry]:
        return sorted((i.entry for i in self._index.values()), key=lambda e: (e.created_at, e.voice_id))

    def __len__(self) -> int:
        return len(self._index)

    def engines_in_use(self) -> dict[str, int]:
        return dict(Counter(i.entry.engine for i in self._index.values()))

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
        if not reg.x_vector_only_mode and not ref_text and not self.families[reg.engine].transcript_optional:
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
        voice_id = _expected(
            reg, compute_voice_id(reg.audio, reg.engine, reg.x_vector_only_mode, reg.seed_audio, seed_text)
        )

        with self._lock:
            try:
                existing, damage = self._current(voice_id), None
            except ServiceError as exc:  # a damaged folder: replace=true overwrites it
                existing, damage = None, exc
            if existing is not None and existing.ref_text.strip() == ref_text:
                return existing, False
            if not reg.replace:
                if existing is None and damage is not None:
                    raise Conflict(
                        f"a folder for voice {voice_id} exists but could not be loaded; "
                        "pass replace=true to overwrite it",
                        code="voice_exists",
                    )
                if existing is not None:
                    raise Conflict(
                        f"voice {voice_id} is already registered with a different ref_text; "
                        "pass replace=true to replace it",
                        code="voice_exists",
                    )
            meta = ClipMeta(
                voice_id=voice_id,
                engine=reg.engine,
                ref_text=ref_text,
                x_vector_only_mode=reg.x_vector_only_mode,
                seed_text=seed_text,
                created_at=time.time(),
                duration_s=clip.duration_s,
                sample_rate=clip.sample_rate,
                language=reg.language or None,
            )
            files = {AUDIO_FILE: clip.wav, **({SEED_FILE: seed.wav} if seed is not None else {})}
            # The id hashes the bytes as uploaded: keep them where the stored WAV had to be re-encoded, so a
            # bundle of this voice can prove its id on another node.
            if clip.reencoded:
                files[ORIGINAL_AUDIO_FILE] = reg.audio
            if seed is not None and seed.reencoded and reg.seed_audio is not None:
                files[ORIGINAL_SEED_FILE] = reg.seed_audio
            try:
                replaced = self._install(voice_id, files, meta, replace=reg.replace)
            except _IdTaken:
                theirs = self._loadable(voice_id)
                if theirs is not None and theirs.ref_text.strip() == ref_text:
                    return theirs, False
                raise Conflict(
                    f"voice {voice_id} was registered at the same moment by another registration with a different "
                    "ref_text; pass replace=true to replace it",
                    code="voice_exists",
                ) from None
            entry = self._installed(voice_id)
        log.info("%s voice %s (engine %s)", "replaced" if replaced else "registered", voice_id, reg.engine)
        return entry, True

    def _register_pack(self, reg: Registration) -> tuple[VoiceEntry, bool]:
        """A Kokoro style pack: validated without running any pickle, stored as a plain .npy, id from its values."""
        assert reg.voice_pack is not None
        family = self.families.get(reg.engine)
        if family is None:
            raise _unknown_engine(reg.engine, self.families)
        if not family.accepts_packs:
            raise InvalidInput(
                f"engine {reg.engine!r} takes no voice_pack; it clones from an 'audio' clip",
                code="engine_takes_no_pack",
            )
        if reg.audio:
            raise InvalidInput("give either an 'audio' clip or a 'voice_pack', not both", code="audio_and_pack")
        self._check_size("voice_pack", reg.voice_pack)
        pack = read_pack(reg.voice_pack, reg.voice_pack_filename)
        voice_id = _expected(reg, pack_id(pack))
        buffer = io.BytesIO()
        np.save(buffer, pack, allow_pickle=False)
        with self._lock:
            # A damaged folder under this id is rewritten: the upload holds exactly what it should hold.
            existing = self._loadable(voice_id)
            if existing is not None and existing.pack_path is None:
                raise Conflict(f"voice {voice_id} is registered, and is not a pack", code="voice_exists")
            if existing is not None and existing.pack_path is not None and _intact_pack(existing.pack_path, voice_id):
                return existing, False
            meta = PackMeta(voice_id=voice_id, engine=reg.engine, created_at=time.time(), language=reg.language or None)
            try:
                self._install(voice_id, {PACK_FILE: buffer.getvalue()}, meta, replace=(self.root / voice_id).exists())
            except _IdTaken:
                theirs = self._loadable(voice_id)
                if theirs is None:
                    raise Conflict(
                        f"voice pack {voice_id} was written at the same moment by another registration that could "
                        "not be loaded; retry",
                        code="voice_exists",
                    ) from None
                return theirs, False
            entry = self._installed(voice_id)
        log.info("registered voice pack %s (engine %s)", voice_id, reg.engine)
        return entry, True

    def delete(self, voice_id: str) -> VoiceEntry:
        with self._lock:
            entry = self._current(check_voice_id(voice_id))  # checks the id's form before it can name a path
            if entry is None:
                raise NotFound(f"no voice {voice_id} is registered on this node", code="voice_not_found")
            trash = self.root / f"{_DELETED_TRASH_PREFIX}{voice_id}-{uuid.uuid4().hex}"
            try:
                os.rename(entry.folder, trash)
            except FileNotFoundError:  # another node deleted it just now
                self._forget(voice_id)
                raise NotFound(f"no voice {voice_id} is registered on this node", code="voice_not_found") from None
            self._forget(voice_id)
            _fsync_dir(self.root)
            _remove_quietly(trash)
        log.info("deleted voice %s", voice_id)
        return entry

    # -- the index against the disk (callers hold the lock) --------------------------------------------------------

    def _current(self, voice_id: str) -> VoiceEntry | None:
        """The voice as its folder has it now (None when there is none), reading the folder again only when its
        meta.json changed since it was indexed. A damaged folder is forgotten and raises `voice_damaged`."""
        folder = self.root / voice_id
        stamp = _meta_stamp(folder)
        indexed = self._index.get(voice_id)
        if indexed is not None and stamp is not None and indexed.stamp == stamp:
            return indexed.entry
        if stamp is None and not os.path.lexists(folder):
            self._forget(voice_id)
            return None
        try:
            entry = _read_entry(folder)
        except Unusable as exc:
            self._forget(voice_id)
            self._report(folder, exc)
            raise ServiceError(  # why goes to the log only: it names this node's paths
                f"voice {voice_id} is stored on this node but cannot be loaded; register it again "
                "(with replace=true for a clip) to overwrite it",
                code="voice_damaged",
            ) from None
        self._keep(entry, stamp)
        return entry

    def _loadable(self, voice_id: str) -> VoiceEntry | None:
        """The voice under this id if it loads (one another registration installed while ours was written, say)."""
        try:
            return self._current(voice_id)
        except ServiceError:
            return None

    def _installed(self, voice_id: str) -> VoiceEntry:
        """The voice just written, read back as any other node would read it."""
        entry = self._current(voice_id)
        if entry is None:
            raise RuntimeError(f"voice {voice_id} vanished right after it was written")
        return entry

    def _keep(self, entry: VoiceEntry, stamp: tuple[int, int] | None) -> None:
        self._index = {**self._index, entry.voice_id: _Indexed(entry, stamp or _NO_STAMP)}
        self._reported.discard(entry.voice_id)

    def _forget(self, voice_id: str) -> None:
        if voice_id in self._index:
            self._index = {k: v for k, v in self._index.items() if k != voice_id}

    def _report(self, folder: Path, why: object) -> None:
        if folder.name not in self._reported:
            self._reported.add(folder.name)
            log.warning("skipping voice folder %s: %s", folder, why)

    # -- validation ----------------------------------------------------------------------------------------------

    def _check_engine(self, engine: str) -> None:
        family = self.families.get(engine)
        if family is None:
            raise _unknown_engine(engine, self.families)
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
            return _Clip(wav=data, duration_s=duration, sample_rate=sample_rate, reencoded=False)
        out = io.BytesIO()
        sf.write(out, samples, sample_rate, format="WAV", subtype="PCM_16")
        return _Clip(wav=out.getvalue(), duration_s=duration, sample_rate=sample_rate, reencoded=True)

    # -- atomic writes -------------------------------------------------------------------------------------------

    def _install(self, voice_id: str, files: Mapping[str, bytes], meta: VoiceMeta, *, replace: bool) -> bool:
        """Write a complete folder beside the registry, then rename it in. Returns whether a voice was replaced.

        Without `replace`, the rename onto a folder that another registration put there first fails (a folder is
        never renamed onto a non-empty one), which raises `_IdTaken`. A full disk is a 507 with nothing left behind.
        """
        dest = self.root / voice_id
        tmp = self.root / f"{_TMP_PREFIX}{voice_id}-{uuid.uuid4().hex}-{os.getpid()}.{_RUN}.{_NODE}"
        trash: Path | None = None
        try:
            tmp.mkdir()
            for name, data in files.items():
                _write_bytes(tmp / name, data)
            _write_json(tmp / META_FILE, meta)  # last: a folder with meta.json is a finished one
            _fsync_dir(tmp)
            if replace and dest.exists():
                trash = self.root / f"{_TRASH_PREFIX}{voice_id}-{uuid.uuid4().hex}"
                os.rename(dest, trash)
            try:
                os.rename(tmp, dest)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise _IdTaken(voice_id) from exc
                raise
            _fsync_dir(self.root)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if trash is not None and trash.exists():
                if dest.exists():  # another registration's voice took the place: ours is not coming back
                    _remove_quietly(trash)
                else:
                    os.rename(trash, dest)
            if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
                log.warning("voice %s not stored: %s", voice_id, exc.strerror)
                raise InsufficientStorage(
                    f"no space left on the voices volume to store voice {voice_id}; nothing was stored",
                    code="insufficient_storage",
                ) from None
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
                if _age(path) < _LEFTOVER_AGE_S and not _abandoned(name):
                    continue  # perhaps another node's registration under way
                log.info("removing unfinished registration %s", name)
                _remove_quietly(path)
            elif name.startswith(_TRASH_PREFIX):
                voice_id = name[len(_TRASH_PREFIX) : len(_TRASH_PREFIX) + 16]
                orphaned = (
                    is_voice_id(voice_id)
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

    def _load_all(self) -> None:
        index: dict[str, _Indexed] = {}
        for name in sorted(os.listdir(self.root)):
            if not is_voice_id(name):
                if not name.startswith("."):
                    log.info("ignoring %s in %s: not a voice id", excerpt(name), self.root)
                continue
            folder = self.root / name
            stamp = _meta_stamp(folder)
            try:
                index[name] = _Indexed(_read_entry(folder), stamp or _NO_STAMP)
            except Unusable as exc:
                self._report(folder, exc)  # the folder is left for the operator
        self._index = index


def _unknown_engine(engine: str, families: Mapping[str, EngineSpec]) -> InvalidInput:
    return InvalidInput(
        f"unknown engine {excerpt(engine)!r}; known engines: {', '.join(sorted(families))}", code="unknown_engine"
    )


def _intact_pack(path: Path, voice_id: str) -> bool:
    try:
        read_stored_pack(path, voice_id)
    except ServiceError:  # logged once by read_stored_pack
        return False
    return True


def _meta_stamp(folder: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(folder / META_FILE)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _node() -> str:
    """This host as temporary folders name it: its name and, on Linux, its pid namespace (containers that share a
    host name and a voices folder cannot see each other's processes)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # e.g. pid:[4026531836]
    except OSError:
        namespace = ""
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname() + namespace)[:80]


_NODE = _node()


def _abandoned(name: str) -> bool:
    """Whether a `.tmp-` folder was written by a process of this host that has ended (it crashed mid-write): such a
    folder is litter at once. One of another node, of a process still running, or named the older way is not."""
    _, _, written = name[len(_TMP_PREFIX) :].partition("-")  # after the voice id
    _, _, writer = written.partition("-")  # after the write's own uuid
    pid, _, rest = writer.partition(".")
    run, _, node = rest.partition(".")
    if node != _NODE or not pid.isdigit() or int(pid) <= 0:
        return False
    if int(pid) == os.getpid():
        return run != _RUN
    try:
        os.kill(int(pid), 0)  # signal 0 only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's) or cannot be asked: leave its folder alone
        return False
    return False


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return math.inf


def _expected(reg: Registration, voice_id: str) -> str:
    """The id a registration comes out as, checked against the one it claims (a bundle's) before anything is written."""
    if reg.expected_id is not None and reg.expected_id != voice_id:
        raise InvalidInput(
            f"the bundle claims voice {excerpt(reg.expected_id)} but its content is voice {voice_id}: "
            "tampered or damaged, refused",
            code="bundle_id_mismatch",
        )
    return voice_id


# -- reading a stored voice: meta.json and every file it names checked, `Unusable` says why not ----------------------


def _read_entry(folder: Path) -> VoiceEntry:
    if not folder.is_dir():
        raise Unusable("not a folder")
    meta = read_meta(folder)
    created_at = meta.created_at if meta.created_at is not None else folder.stat().st_mtime
    if isinstance(meta, PackMeta):
        if not (folder / PACK_FILE).is_file():
            raise Unusable(f"no {PACK_FILE}")
        problem = stored_pack_problem(folder / PACK_FILE)
        if problem is not None:
            raise Unusable(f"{PACK_FILE}: {problem}")
        return VoiceEntry(
            voice_id=folder.name,
            engine=meta.engine,
            ref_text="",
            x_vector_only_mode=False,
            seed_text=None,
            has_seed_audio=False,
            created_at=created_at,
            duration_s=0.0,
            sample_rate=0,
            folder=folder,
            kind="pack",
            language=meta.language,
        )
    frames, rate = _clip_info(folder / AUDIO_FILE)
    duration_s, sample_rate = meta.duration_s, meta.sample_rate
    if duration_s is not None and sample_rate is not None:
        if int(sample_rate) != rate or abs(frames / rate - duration_s) > _DURATION_SLACK_S:
            raise Unusable(
                f"{AUDIO_FILE} holds {frames / rate:.3f} s at {rate} Hz where {META_FILE} says "
                f"{duration_s:.3f} s at {sample_rate:g} Hz (cut short or replaced)"
            )
    has_seed_audio = os.path.lexists(folder / SEED_FILE)
    if has_seed_audio:
        _clip_info(folder / SEED_FILE)
    return VoiceEntry(
        voice_id=folder.name,
        engine=meta.engine,
        ref_text=meta.ref_text,
        x_vector_only_mode=meta.x_vector_only_mode,
        seed_text=meta.seed_text,
        has_seed_audio=has_seed_audio,
        created_at=created_at,
        duration_s=frames / rate,
        sample_rate=rate,
        folder=folder,
        language=meta.language,
    )


def _clip_info(path: Path) -> tuple[int, int]:
    """(frames, sample rate) of a stored clip, from its header; a regular file only (a FIFO would block)."""
    if not path.is_file():
        raise Unusable(f"no {path.name}")
    try:
        info = sf.info(str(path))
    except (sf.SoundFileError, RuntimeError, ValueError, OSError) as exc:
        raise Unusable(f"{path.name} is not readable audio ({exc})") from None
    if info.frames <= 0 or info.samplerate <= 0:
        raise Unusable(f"{path.name} holds no audio")
    return info.frames, info.samplerate


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_json(path: Path, meta: VoiceMeta) -> None:
    _write_bytes(path, meta.to_json())


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
    """Drop a leftover; a failure only leaves litter that the next start removes (or another node removed it)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)
