"""The voices a node has indexed: what is registered, as each folder's meta.json was when it was read.

Readers take the index without a lock: a writer (the registry, holding its own lock) swaps in a new dict rather than
change the one a reader may be iterating.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from voicebank.voice_entry import VoiceEntry
from voicebank.voice_store import Stamp

log = logging.getLogger("polytts.registry")

_NO_STAMP = (-1, -1)  # meta.json vanished while it was read: read the folder again next time


@dataclass(frozen=True)
class _Indexed:
    entry: VoiceEntry
    stamp: Stamp
    """The folder's meta.json stamp when it was read."""


class VoiceIndex:
    def __init__(self) -> None:
        self._entries: dict[str, _Indexed] = {}
        self._reported: set[str] = set()  # damaged folders already logged, so each is logged once

    def get(self, voice_id: str) -> VoiceEntry | None:
        indexed = self._entries.get(voice_id)
        return indexed.entry if indexed is not None else None

    def fresh(self, voice_id: str, stamp: Stamp | None) -> VoiceEntry | None:
        """The voice as indexed, if its folder's meta.json is still the one that was read (`stamp`, now)."""
        indexed = self._entries.get(voice_id)
        return indexed.entry if indexed is not None and stamp is not None and indexed.stamp == stamp else None

    def entries(self) -> list[VoiceEntry]:
        """Every indexed voice, the oldest first."""
        return sorted((i.entry for i in self._entries.values()), key=lambda e: (e.created_at, e.voice_id))

    def __len__(self) -> int:
        return len(self._entries)

    def engines_in_use(self) -> dict[str, int]:
        return dict(Counter(i.entry.engine for i in self._entries.values()))

    def load(self, read: Iterable[tuple[VoiceEntry, Stamp | None]]) -> None:
        """Index exactly these voices (each with its stamp when it was read), forgetting every other."""
        self._entries = {entry.voice_id: _Indexed(entry, stamp or _NO_STAMP) for entry, stamp in read}

    def keep(self, entry: VoiceEntry, stamp: Stamp | None) -> None:
        self._entries = {**self._entries, entry.voice_id: _Indexed(entry, stamp or _NO_STAMP)}
        self._reported.discard(entry.voice_id)

    def forget(self, voice_id: str) -> None:
        if voice_id in self._entries:
            self._entries = {k: v for k, v in self._entries.items() if k != voice_id}

    def report(self, folder: Path, why: object) -> None:
        """One warning for a damaged voice folder, the first time it is found so (until it loads again)."""
        if folder.name not in self._reported:
            self._reported.add(folder.name)
            log.warning("skipping voice folder %s: %s", folder, why)
