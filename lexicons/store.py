"""The lexicons folder: one `<lexicon_id>.json` per lexicon (its canonical content, which its id hashes), written
atomically, read once at start and checked against its name.

A lexicon is immutable: changing one is storing another (another id), so a stored file is never rewritten, and two
nodes (or two requests) storing the same lexicon write the same bytes.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from durable import write_synced
from engines.artefacts import write_atomically
from errors import NotFound
from lexicons.lexicon import LEXICON_ID, Lexicon, check_lexicon_id

log = logging.getLogger("polytts.lexicons")


class LexiconStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._lexicons: dict[str, Lexicon] = {}
        self._load()

    def _load(self) -> None:
        if not self.root.is_dir():
            return
        for path in sorted(self.root.glob("*.json")):
            if not LEXICON_ID.match(path.stem):
                continue
            try:
                lexicon = Lexicon.from_canonical(path.read_bytes())
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("lexicon %s is unreadable (%s); skipped", path.name, exc)
                continue
            if lexicon.lexicon_id != path.stem:
                log.warning("lexicon %s does not hash to its name; skipped", path.name)
                continue
            self._lexicons[path.stem] = lexicon

    def put(self, lexicon: Lexicon) -> bool:
        """Store it; False when it was stored already (nothing written)."""
        lexicon_id = lexicon.lexicon_id
        with self._lock:
            if lexicon_id in self._lexicons:
                return False
            write_atomically(self.root / f"{lexicon_id}.json", lambda tmp: write_synced(tmp, lexicon.canonical()))
            self._lexicons[lexicon_id] = lexicon
            return True

    def get(self, lexicon_id: str) -> Lexicon:
        check_lexicon_id(lexicon_id)
        lexicon = self._lexicons.get(lexicon_id)
        if lexicon is None:
            raise NotFound(f"no lexicon {lexicon_id} is stored here", code="lexicon_not_found")
        return lexicon

    def __contains__(self, lexicon_id: str) -> bool:
        return lexicon_id in self._lexicons

    def list(self) -> list[Lexicon]:
        return list(self._lexicons.values())

    def remove(self, lexicon_id: str) -> None:
        self.get(lexicon_id)
        with self._lock:
            (self.root / f"{lexicon_id}.json").unlink(missing_ok=True)
            self._lexicons.pop(lexicon_id, None)
