"""Voice ids: a hash of what was registered, so the same registration gives the same id on every node.

Existing clients hold these ids and bundles prove them on other nodes: the hash must never change by a single bit.
A voice pack's id hashes its values instead, as its family's pack format says (`EngineSpec.packs.voice_id`).
"""

from __future__ import annotations

import hashlib
import re

from errors import InvalidInput
from voicebank.voice_entry import excerpt

VOICE_ID_RE = re.compile(r"[0-9a-f]{16}")


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


def is_voice_id(name: str) -> bool:
    """Whether `name` is a 16-digit lowercase hex id, the whole of it (a trailing newline included)."""
    return VOICE_ID_RE.fullmatch(name) is not None


def check_voice_id(voice_id: str) -> str:
    """Refuse anything but a 16-digit lowercase hex id, so an id can never name a path outside the registry."""
    if not is_voice_id(voice_id):
        raise InvalidInput(
            f"voice_id must be 16 lowercase hex digits, got {excerpt(voice_id, 40)!r}", code="invalid_voice_id"
        )
    return voice_id
