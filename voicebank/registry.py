"""The content-hashed voice registry: what routes and the service register, look up, list and delete.

A registration is validated in memory first (`voicebank.registration`), then written atomically to the voices folder
(`voicebank.voice_store`), and indexed (`voicebank.voice_index`). The id is a hash of what was registered
(`voicebank.ids`), so the same registration gives the same id on every node.

Several nodes may share one voices folder (a network file system): the store's final rename is the only step that
decides which registration of an id wins, so two racing ones end with one intact voice, and an id another node
registered is found on disk (`lookup`). A damaged folder is skipped with one warning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from engines import FAMILIES
from engines.base import EngineSpec
from errors import Conflict, NotFound, ServiceError
from voicebank.ids import check_voice_id
from voicebank.meta import ClipMeta, PackMeta, Unusable
from voicebank.registration import Registration, RegistrationChecks
from voicebank.voice_entry import AUDIO_FILE, ORIGINAL_AUDIO_FILE, ORIGINAL_SEED_FILE, PACK_FILE, SEED_FILE, VoiceEntry
from voicebank.voice_index import VoiceIndex
from voicebank.voice_store import IdTaken, VoiceStore

log = logging.getLogger("polytts.registry")


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
        self.checks = RegistrationChecks(families, max_upload_bytes, min_seconds, max_seconds)
        self.store = VoiceStore(self.root, families)
        self.index = VoiceIndex()
        # Serialises writers; readers take the current index without it (see `VoiceIndex`).
        self._lock = threading.Lock()
        self.store.clean_leftovers()
        self._load_all()
        log.info("loaded %d voice(s) from %s", len(self.index), self.root)

    # -- reading -------------------------------------------------------------------------------------------------

    def get(self, voice_id: str) -> VoiceEntry:
        """A voice this node has indexed; no disk access (see `lookup`)."""
        entry = self.index.get(check_voice_id(voice_id))
        if entry is None:
            raise _not_registered(voice_id)
        return entry

    def lookup(self, voice_id: str) -> VoiceEntry:
        """A voice as its folder on disk has it now: indexed voices cost one stat, and a voice that another node
        sharing the voices folder registered, replaced or deleted is read (or forgotten) here. It touches the disk:
        call it off the event loop. A folder that is there but damaged is the voice's `voice_damaged` error."""
        check_voice_id(voice_id)
        entry = self.index.fresh(voice_id, self.store.stamp(voice_id))
        if entry is not None:
            return entry
        with self._lock:
            entry = self._current(voice_id)
        if entry is None:
            raise _not_registered(voice_id)
        return entry

    def list(self) -> list[VoiceEntry]:
        return self.index.entries()

    def __len__(self) -> int:
        return len(self.index)

    def engines_in_use(self) -> dict[str, int]:
        return self.index.engines_in_use()

    # -- writing -------------------------------------------------------------------------------------------------

    def register(self, reg: Registration) -> tuple[VoiceEntry, bool]:
        """Validate everything in memory first, then write atomically. Returns (entry, created)."""
        if reg.voice_pack is not None:
            return self._register_pack(reg)
        voice = self.checks.clip_voice(reg)
        voice_id, ref_text = voice.voice_id, voice.ref_text
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
            clip, seed = voice.clip, voice.seed
            meta = ClipMeta(
                voice_id=voice_id,
                engine=reg.engine,
                ref_text=ref_text,
                x_vector_only_mode=reg.x_vector_only_mode,
                seed_text=voice.seed_text,
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
                replaced = self.store.install(voice_id, files, meta, replace=reg.replace)
            except IdTaken:
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
        """A style pack: validated by its family's pack format, stored as a plain .npy, id from its values."""
        pack = self.checks.pack_voice(reg)
        voice_id = pack.voice_id
        with self._lock:
            # A damaged folder under this id is rewritten: the upload holds exactly what it should hold.
            existing = self._loadable(voice_id)
            if existing is not None and existing.pack_path is None:
                raise Conflict(f"voice {voice_id} is registered, and is not a pack", code="voice_exists")
            if existing is not None and self.store.intact_pack(existing):
                return existing, False
            meta = PackMeta(voice_id=voice_id, engine=reg.engine, created_at=time.time(), language=reg.language or None)
            try:
                self.store.install(voice_id, {PACK_FILE: pack.npy}, meta, replace=self.store.folder(voice_id).exists())
            except IdTaken:
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
                raise _not_registered(voice_id)
            removed = self.store.remove(entry)
            self.index.forget(voice_id)
            if not removed:  # another node deleted it just now
                raise _not_registered(voice_id)
        log.info("deleted voice %s", voice_id)
        return entry

    # -- the index against the disk (callers hold the lock) --------------------------------------------------------

    def _current(self, voice_id: str) -> VoiceEntry | None:
        """The voice as its folder has it now (None when there is none), reading the folder again only when its
        meta.json changed since it was indexed. A damaged folder is forgotten and raises `voice_damaged`."""
        stamp = self.store.stamp(voice_id)
        indexed = self.index.fresh(voice_id, stamp)
        if indexed is not None:
            return indexed
        if stamp is None and not self.store.holds(voice_id):
            self.index.forget(voice_id)
            return None
        try:
            entry = self.store.read(voice_id)
        except Unusable as exc:
            self.index.forget(voice_id)
            self.index.report(self.store.folder(voice_id), exc)
            raise ServiceError(  # why goes to the log only: it names this node's paths
                f"voice {voice_id} is stored on this node but cannot be loaded; register it again "
                "(with replace=true for a clip) to overwrite it",
                code="voice_damaged",
            ) from None
        self.index.keep(entry, stamp)
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

    def _load_all(self) -> None:
        read = []
        for voice_id in self.store.voice_ids():
            stamp = self.store.stamp(voice_id)
            try:
                read.append((self.store.read(voice_id), stamp))
            except Unusable as exc:
                self.index.report(self.store.folder(voice_id), exc)  # the folder is left for the operator
        self.index.load(read)


def _not_registered(voice_id: str) -> NotFound:
    return NotFound(f"no voice {voice_id} is registered on this node", code="voice_not_found")
