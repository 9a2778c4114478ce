"""The voices folder on disk: one folder per voice, written atomically, read back checked, and mended after a crash.

One folder per voice, `<root>/<voice_id>/{voice.wav, meta.json, seed.wav?}` (or `voice_pack.npy` for a pack), the
layout earlier deployments wrote, so a copied voices folder loads as is. Every write goes to a temporary folder that is
renamed into place: a crash or a failed write leaves no half voice, and a replace never loses the voice it replaces
(the old folder waits under a trash name until its successor is in). At start-up, what a crash interrupted is finished
(`clean_leftovers`). Several nodes may share the folder: the final rename is the only step that decides which
registration of an id wins, and a temporary folder another node may still be writing is left alone.

Everything read back is checked first (`meta.json` against `voicebank.meta`, then the files it names, a pack by its
family's pack format); `Unusable` says why a folder cannot be a voice.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import soundfile as sf

from durable import fsync_dir, write_synced
from engines.base import EngineSpec
from errors import InsufficientStorage, ServiceError
from voicebank.ids import is_voice_id
from voicebank.meta import PackMeta, Unusable, VoiceMeta, read_meta
from voicebank.voice_entry import AUDIO_FILE, META_FILE, PACK_FILE, SEED_FILE, VoiceEntry, excerpt

log = logging.getLogger("polytts.registry")

_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
# Deleted voices go to a trash name that does not parse as `.trash-<id>-`, so a crash mid-delete never resurrects them.
_DELETED_TRASH_PREFIX = ".trash-deleted-"
# Another node may be writing its own `.tmp-` folder in a shared voices folder: only older ones are litter, unless
# the folder's name says that a process of this host wrote it and has ended since (`_abandoned`).
_LEFTOVER_AGE_S = 3600.0
# A temporary folder's name ends with its writer, `<pid>.<run>.<node>`: the run tells this process from an earlier one
# that had the same pid (a restarted container's).
_RUN = uuid.uuid4().hex[:12]
# How far a clip may be from the duration its meta.json records before it counts as cut short or replaced.
_DURATION_SLACK_S = 0.05
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})

Stamp = tuple[int, int]
"""(inode, mtime) of a voice folder's meta.json: a change means another node rewrote the voice."""


class IdTaken(Exception):
    """Another registration (maybe another node's) renamed its folder into place first."""


class VoiceStore:
    """The voices folder at `root`; `families` say what a stored pack of each family must hold."""

    def __init__(self, root: Path, families: Mapping[str, EngineSpec]) -> None:
        self.root = root
        self.families = families
        self.root.mkdir(parents=True, exist_ok=True)

    def folder(self, voice_id: str) -> Path:
        return self.root / voice_id

    def stamp(self, voice_id: str) -> Stamp | None:
        """The (inode, mtime) of the voice's meta.json; None when it has none."""
        try:
            st = os.stat(self.folder(voice_id) / META_FILE)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def holds(self, voice_id: str) -> bool:
        """Whether anything at all is stored under the id (a damaged folder, even a dangling link)."""
        return os.path.lexists(self.folder(voice_id))

    def voice_ids(self) -> list[str]:
        """The ids of the folders stored, in order; anything else there but a leftover is logged and left alone."""
        ids = []
        for name in sorted(os.listdir(self.root)):
            if is_voice_id(name):
                ids.append(name)
            elif not name.startswith("."):
                log.info("ignoring %s in %s: not a voice id", excerpt(name), self.root)
        return ids

    # -- reading a stored voice: meta.json and every file it names checked, `Unusable` says why not ----------------

    def read(self, voice_id: str) -> VoiceEntry:
        folder = self.folder(voice_id)
        if not folder.is_dir():
            raise Unusable("not a folder")
        meta = read_meta(folder)
        created_at = meta.created_at if meta.created_at is not None else folder.stat().st_mtime
        if isinstance(meta, PackMeta):
            if not (folder / PACK_FILE).is_file():
                raise Unusable(f"no {PACK_FILE}")
            family = self.families.get(meta.engine)
            if family is None or family.packs is None:
                raise Unusable(f"engine {meta.engine!r} takes no voice packs")
            problem = family.packs.stored_problem(folder / PACK_FILE)
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

    def intact_pack(self, entry: VoiceEntry) -> bool:
        """Whether a stored pack reads back in full with the values its id hashes (a damaged one is logged once)."""
        family = self.families.get(entry.engine)
        if entry.pack_path is None or family is None or family.packs is None:
            return False
        try:
            family.packs.read_stored(entry.pack_path, entry.voice_id)
        except ServiceError:
            return False
        return True

    # -- atomic writes -----------------------------------------------------------------------------------------------

    def install(self, voice_id: str, files: Mapping[str, bytes], meta: VoiceMeta, *, replace: bool) -> bool:
        """Write a complete folder beside the voices, then rename it in. Returns whether a voice was replaced.

        Without `replace`, the rename onto a folder that another registration put there first fails (a folder is
        never renamed onto a non-empty one), which raises `IdTaken`. A full disk is a 507 with nothing left behind.
        """
        dest = self.folder(voice_id)
        tmp = self.root / f"{_TMP_PREFIX}{voice_id}-{uuid.uuid4().hex}-{os.getpid()}.{_RUN}.{_NODE}"
        trash: Path | None = None
        try:
            tmp.mkdir()
            for name, data in files.items():
                write_synced(tmp / name, data)
            _write_json(tmp / META_FILE, meta)  # last: a folder with meta.json is a finished one
            fsync_dir(tmp)
            if replace and dest.exists():
                trash = self.root / f"{_TRASH_PREFIX}{voice_id}-{uuid.uuid4().hex}"
                os.rename(dest, trash)
            try:
                os.rename(tmp, dest)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise IdTaken(voice_id) from exc
                raise
            fsync_dir(self.root)
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

    def remove(self, entry: VoiceEntry) -> bool:
        """Delete a stored voice: renamed out of place at once (durably), then removed. False when it was gone
        already (another node deleted it just now)."""
        trash = self.root / f"{_DELETED_TRASH_PREFIX}{entry.voice_id}-{uuid.uuid4().hex}"
        try:
            os.rename(entry.folder, trash)
        except FileNotFoundError:
            return False
        fsync_dir(self.root)
        _remove_quietly(trash)
        return True

    def clean_leftovers(self) -> None:
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
                    and not self.folder(voice_id).exists()
                )
                if orphaned:
                    log.warning("restoring voice %s from %s (a replace was interrupted)", voice_id, name)
                    try:
                        os.rename(path, self.folder(voice_id))
                    except OSError as exc:
                        log.warning("could not restore %s: %s", name, exc)
                else:
                    log.info("removing leftover %s", name)
                    _remove_quietly(path)


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


def _write_json(path: Path, meta: VoiceMeta) -> None:
    write_synced(path, meta.to_json())


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
