"""Kokoro-82M v1.0's 54 stock voice packs, shipped in the repository (data/kokoro-voices/, see NOTICE).

One `.npz` holds the packs by name, float32 (510, 1, 256) each; `sha256.json` holds a sum per pack over its
little-endian float32 bytes in C order. `sha256.json` is the list of stock voices: listing them (GET /voices, while
the engine may not be loaded) reads only that small file, and a pack is read from the archive, and verified, only
when it is first used or when the engine loads them all.

A pack that is missing or fails its sum is skipped with one warning naming it, and the other voices are served: one
damaged voice is no reason to take down every other voice of the default engine. A request for it gets a clear
error naming the pack and what to do. A missing sums file or archive makes every voice unusable and says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engines.kokoro.voicepacks import PACK_SHAPE
from errors import NotFound, ServiceError
from text.languages import Gender, Language, voice_gender, voice_language

log = logging.getLogger("polytts.engines.stock_voices")

STOCK_DIR = Path(__file__).resolve().parents[2] / "data" / "kokoro-voices"
ARCHIVE = "kokoro-v1_0-voices.npz"
SUMS = "sha256.json"


class VoicePackCorrupt(ServiceError):
    """A stock pack that is missing or fails its sum: the install is damaged (restore data/kokoro-voices)."""

    code = "voice_pack_corrupt"


@dataclass(frozen=True)
class StockVoice:
    name: str
    language: Language | None
    gender: Gender | None


def pack_sum(pack: np.ndarray) -> str:
    """The published sum of a pack: sha256 over its little-endian float32 bytes in C order."""
    return hashlib.sha256(np.ascontiguousarray(pack, dtype="<f4").tobytes()).hexdigest()


class StockVoices:
    """The stock packs of one folder: cheap to list, each read and verified once."""

    def __init__(self, folder: Path = STOCK_DIR) -> None:
        self.folder = folder
        self._sums: dict[str, str] | None = None
        self._packs: dict[str, np.ndarray] = {}
        self._bad: dict[str, str] = {}
        self._lock = threading.Lock()

    def voices(self) -> list[StockVoice]:
        """Every stock voice not known to be damaged, with the language and gender its name gives."""
        return [StockVoice(name, voice_language(name), voice_gender(name)) for name in self.names()]

    def names(self) -> list[str]:
        return [name for name in self._published() if name not in self._bad]

    @property
    def damaged(self) -> dict[str, str]:
        """Packs found missing or corrupt so far, with why."""
        return dict(self._bad)

    def pack(self, name: str) -> np.ndarray:
        """One verified pack, shape (510, 1, 256) float32; read from the archive on first use."""
        pack = self._packs.get(name)
        if pack is not None:
            return pack
        if name not in self._published():
            raise NotFound(f"Kokoro has no stock voice {name!r}", code="voice_not_found")
        with self._lock:
            if name not in self._packs and name not in self._bad:
                self._read([name])
        if name in self._bad:
            raise self._error(name)
        return self._packs[name]

    def load_all(self) -> dict[str, np.ndarray]:
        """Read and verify every pack (when the engine loads); damaged ones are skipped with one warning."""
        with self._lock:
            self._read([n for n in self._published() if n not in self._packs and n not in self._bad])
        return dict(self._packs)

    def _published(self) -> dict[str, str]:
        if self._sums is None:
            path = self.folder / SUMS
            try:
                sums = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise VoicePackCorrupt(
                    f"the stock voice sums {path} cannot be read ({exc}); restore data/kokoro-voices from the "
                    "repository (git checkout -- data/kokoro-voices)"
                ) from None
            if not isinstance(sums, dict) or not all(isinstance(v, str) for v in sums.values()):
                raise VoicePackCorrupt(f"the stock voice sums {path} are not a JSON object of name: sha256")
            self._sums = dict(sorted(sums.items()))
        return self._sums

    def _read(self, names: list[str]) -> None:
        """Read, check and keep `names`; record each failure. Runs under the lock."""
        if not names:
            return
        sums = self._published()
        failed: dict[str, str] = {}
        try:
            with np.load(self.folder / ARCHIVE, allow_pickle=False) as archive:
                present = set(archive.files)
                for name in names:
                    if name not in present:
                        failed[name] = f"missing from {ARCHIVE}"
                        continue
                    try:
                        pack = archive[name]
                    except (OSError, ValueError, zipfile.BadZipFile) as exc:
                        failed[name] = f"unreadable ({exc})"
                        continue
                    if pack.shape != PACK_SHAPE or pack.dtype != np.float32:
                        failed[name] = f"has shape {pack.shape} and dtype {pack.dtype}, not {PACK_SHAPE} float32"
                    elif pack_sum(pack) != sums[name]:
                        failed[name] = "fails its sha256"
                    else:
                        self._packs[name] = np.ascontiguousarray(pack, dtype=np.float32)
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            failed.update({name: f"{ARCHIVE} cannot be read ({exc})" for name in names if name not in failed})
        if failed:
            self._bad.update(failed)
            log.warning(
                "skipping %d damaged Kokoro stock voice pack(s) in %s, serving the rest: %s; restore the folder "
                "from the repository (git checkout -- data/kokoro-voices)",
                len(failed),
                self.folder,
                "; ".join(f"{name} {why}" for name, why in sorted(failed.items())),
            )

    def _error(self, name: str) -> VoicePackCorrupt:
        return VoicePackCorrupt(
            f"stock voice pack {name!r} {self._bad[name]}; the install is damaged: restore data/kokoro-voices "
            "from the repository (git checkout -- data/kokoro-voices)",
            detail={"voice": name},
        )
