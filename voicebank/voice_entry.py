"""What a registered voice is, as every layer sees it: the registry writes it, engines read it, routes show it.

This module imports nothing of the project's, so the registry and the engines can both depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

AUDIO_FILE = "voice.wav"
SEED_FILE = "seed.wav"
PACK_FILE = "voice_pack.npy"
META_FILE = "meta.json"
ORIGINAL_AUDIO_FILE = "voice.orig"
"""The clip as uploaded, kept when it was not a WAV (voice.wav is then a re-encoding): the id hashes these bytes."""
ORIGINAL_SEED_FILE = "seed.orig"


@dataclass(frozen=True)
class VoiceEntry:
    voice_id: str
    engine: str
    ref_text: str
    x_vector_only_mode: bool
    seed_text: str | None
    has_seed_audio: bool
    created_at: float
    """Unix seconds."""
    duration_s: float
    """Duration of the reference clip (0 for a pack, which has none)."""
    sample_rate: int
    folder: Path
    kind: Literal["clip", "pack"] = "clip"
    """A reference clip to clone from, or a Kokoro style pack (`voice_pack.npy`)."""
    language: str | None = None
    """The language the voice was registered with, when one was given: a request naming none follows it."""

    @property
    def audio_path(self) -> Path:
        return self.folder / AUDIO_FILE

    @property
    def pack_path(self) -> Path | None:
        return self.folder / PACK_FILE if self.kind == "pack" else None

    @property
    def seed_path(self) -> Path | None:
        return self.folder / SEED_FILE if self.has_seed_audio else None

    def uploaded(self, stored: str, original: str) -> Path:
        """The file whose bytes the id hashes: the upload as sent when it had to be re-encoded, else the stored one."""
        kept = self.folder / original
        return kept if kept.is_file() else self.folder / stored

    def public(self) -> dict[str, Any]:
        """What clients see: no paths, which are this node's business; a pack has no clip to describe."""
        common = {
            "voice_id": self.voice_id,
            "engine": self.engine,
            "kind": self.kind,
            "created_at": self.created_at,
            "language": self.language,
        }
        if self.kind == "pack":
            return common
        return {
            **common,
            "ref_text": self.ref_text,
            "x_vector_only_mode": self.x_vector_only_mode,
            "seed_text": self.seed_text,
            "has_seed_audio": self.has_seed_audio,
            "duration_s": self.duration_s,
            "sample_rate": self.sample_rate,
        }


def excerpt(name: str, limit: int = 64) -> str:
    """A client-supplied name as a message quotes it: whole when short, else its first `limit` characters and its
    length, so a megabyte-long id is never echoed back whole."""
    if len(name) <= limit:
        return name
    return f"{name[:limit]}… ({len(name)} characters)"
