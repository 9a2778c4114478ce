"""In-memory LRU of finished audio (PCM), bounded in bytes, and the one cache key both caches share.

The key covers everything that changes the audio (text, voice, engine, checkpoint, every generation parameter), so
a hit can never serve audio that another request would not have produced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping

log = logging.getLogger("polytts.cache")


def synthesis_key(*, text: str, voice_id: str, engine: str, checkpoint: str, params: Mapping[str, object]) -> str:
    """Return the sha256 hex of a canonical JSON of every field that determines the audio.

    `params` holds every generation parameter; its key order does not matter (keys are sorted). Values must be
    JSON-serialisable; callers normalise them first (1 and 1.0 give different keys).
    """
    canonical = json.dumps(
        {"text": text, "voice_id": voice_id, "engine": engine, "checkpoint": checkpoint, "params": dict(params)},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    # surrogatepass: text decoded from JSON may hold lone surrogates; they still map to distinct bytes.
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


class MemoryCache:
    """Thread-safe LRU of audio bytes whose total size never exceeds `max_bytes` (0 disables it)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        """Return the cached audio or None; a hit makes the entry the most recently used."""
        with self._lock:
            audio = self._entries.get(key)
            if audio is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return audio

    def put(self, key: str, audio: bytes) -> None:
        """Store `audio` under `key`, replacing any old value, then evict least-recently-used entries to the bound.

        An item larger than the whole cache is not stored (it would evict everything and then itself); any old
        value under the same key is dropped all the same, so the cache never serves a superseded value.
        """
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            if len(audio) > self._max_bytes:
                if self._max_bytes:
                    log.debug("audio of %d bytes exceeds cache bound %d; not cached", len(audio), self._max_bytes)
                return
            self._entries[key] = audio
            self._bytes += len(audio)
            while self._bytes > self._max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted)

    def clear(self) -> None:
        """Drop every entry; the hit and miss counters are kept."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def stats(self) -> dict[str, int]:
        """Return entries, bytes, max_bytes, hits and misses."""
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "max_bytes": self._max_bytes,
                "hits": self._hits,
                "misses": self._misses,
            }


def words_key(key: str) -> str:
    """The key of the word timings stored beside the audio of `key` (an entry of its own in both caches)."""
    return hashlib.sha256(f"{key}/words".encode("ascii")).hexdigest()
