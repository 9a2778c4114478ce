"""Pronunciation dictionaries: a name over a lexicon's versions, for the vendor APIs that edit a dictionary in place
(ElevenLabs' add and remove rules).

A lexicon never changes (its id hashes its content); a dictionary's every edit stores a new lexicon and appends it as
its latest version, so a version id is a lexicon id: a request naming a version gets exactly that lexicon, on any
node that holds it. One `<dictionary_id>.json` per dictionary in the store's folder, rewritten atomically.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engines.artefacts import write_atomically
from errors import NotFound
from lexicons.lexicon import LEXICON_ID

DICTIONARY_ID = re.compile(r"^[0-9A-Za-z]{20}$")


@dataclass
class Dictionary:
    dictionary_id: str
    name: str
    description: str | None
    created: int
    """Unix seconds."""
    versions: list[str] = field(default_factory=list)
    """Lexicon ids, oldest first."""

    @property
    def latest(self) -> str:
        return self.versions[-1]

    def version(self, version_id: str | None) -> str:
        """The lexicon id a locator names: its version, which must be one of the dictionary's, or the latest."""
        if version_id is None:
            return self.latest
        if version_id not in self.versions:
            raise NotFound(
                f"pronunciation dictionary {self.dictionary_id} has no version {version_id[:40]!r}",
                code="dictionary_not_found",
            )
        return version_id

    def bundle(self) -> bytes:
        """As it is stored, and as a peer fetches it (`from_bundle`)."""
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_bundle(cls, data: bytes, dictionary_id: str) -> Dictionary:
        """A peer's record of `dictionary_id`, checked: that id, a name, and versions that are lexicon ids; a
        ValueError otherwise."""
        try:
            body = json.loads(data)
            dictionary = cls(**body)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ValueError(f"not a dictionary: {exc}") from None
        versions = dictionary.versions
        if (
            dictionary.dictionary_id != dictionary_id
            or not isinstance(dictionary.name, str)
            or not isinstance(versions, list)
            or not versions
            or not all(isinstance(version, str) and LEXICON_ID.match(version) for version in versions)
        ):
            raise ValueError("another dictionary, one without a name, or versions that are not lexicon ids")
        return dictionary


class DictionaryStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._dictionaries: dict[str, Dictionary] = {}
        for path in sorted(root.glob("*.json")) if root.is_dir() else ():
            try:
                self._dictionaries[path.stem] = Dictionary(**json.loads(path.read_bytes()))
            except (OSError, ValueError, TypeError):
                continue  # a damaged file is no dictionary; the lexicons it named are still stored

    def create(self, name: str, description: str | None, lexicon_id: str) -> Dictionary:
        dictionary = Dictionary(secrets.token_hex(10), name, description, int(time.time()), [lexicon_id])
        self._save(dictionary)
        return dictionary

    def add_version(self, dictionary_id: str, lexicon_id: str, name: str | None = None) -> Dictionary:
        """`lexicon_id` as its latest version (and `name` its name, where given)."""
        with self._lock:
            dictionary = self.get(dictionary_id)
            if dictionary.latest != lexicon_id:
                dictionary.versions.append(lexicon_id)
            dictionary.name = name or dictionary.name
        self._save(dictionary)
        return dictionary

    def get(self, dictionary_id: str) -> Dictionary:
        dictionary = self._dictionaries.get(dictionary_id) if DICTIONARY_ID.match(dictionary_id) else None
        if dictionary is None:
            raise NotFound(
                f"no pronunciation dictionary {dictionary_id[:40]!r} on this node", code="dictionary_not_found"
            )
        return dictionary

    def list(self) -> list[Dictionary]:
        return sorted(self._dictionaries.values(), key=lambda dictionary: dictionary.created)

    def __contains__(self, dictionary_id: str) -> bool:
        return dictionary_id in self._dictionaries

    def remove(self, dictionary_id: str) -> None:
        self.get(dictionary_id)
        with self._lock:
            (self.root / f"{dictionary_id}.json").unlink(missing_ok=True)
            self._dictionaries.pop(dictionary_id, None)

    def _save(self, dictionary: Dictionary) -> None:
        data = dictionary.bundle()
        with self._lock:
            write_atomically(self.root / f"{dictionary.dictionary_id}.json", lambda tmp: Path(tmp).write_bytes(data))
            self._dictionaries[dictionary.dictionary_id] = dictionary
