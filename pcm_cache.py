"""Disk L2 cache of finished PCM (s16le bytes), bounded in bytes, with atomic writes.

Each entry is `<root>/<key>.pcm`. Writes go to a unique temp file in `root`, are fsynced, then `os.replace`d, so
a crash leaves either the whole entry or none (plus a `*.tmp` that the next start deletes). Recency lives in memory
and in file mtimes, so LRU order survives a restart. One process owns a cache folder.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger("polytts.cache")

_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_SUFFIX = ".pcm"
_TMP_SUFFIX = ".tmp"


class PcmCache:
    """Thread-safe LRU of PCM files in `root` whose total size never exceeds `max_bytes` (0 disables it)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self._root = Path(root)
        self._max_bytes = max_bytes
        self._index: OrderedDict[str, int] = OrderedDict()  # key -> size, least recently used first
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._last_ns = 0
        self._lock = threading.Lock()
        self._root.mkdir(parents=True, exist_ok=True)
        if max_bytes:
            self._load()

    def _load(self) -> None:
        """Index existing entries oldest first, delete leftover temp files, evict down to the (maybe new) bound."""
        found: list[tuple[int, str, int]] = []
        with os.scandir(self._root) as it:
            for entry in it:
                if not entry.is_file(follow_symlinks=False):
                    continue
                if entry.name.endswith(_TMP_SUFFIX):
                    log.info("removing leftover temp file %s", entry.path)
                    Path(entry.path).unlink(missing_ok=True)
                    continue
                key = entry.name.removesuffix(_SUFFIX)
                if entry.name.endswith(_SUFFIX) and _KEY_RE.match(key):
                    st = entry.stat(follow_symlinks=False)
                    found.append((st.st_mtime_ns, key, st.st_size))
        for mtime_ns, key, size in sorted(found):
            self._index[key] = size
            self._bytes += size
            self._last_ns = max(self._last_ns, mtime_ns)
        self._evict()
        log.info("pcm cache %s: %d entries, %d bytes", self._root, len(self._index), self._bytes)

    def _path(self, key: str) -> Path:
        return self._root / f"{key}{_SUFFIX}"

    def _stamp(self) -> int:
        """Return a strictly increasing mtime in ns, so coarse clocks cannot tie the LRU order on restart."""
        self._last_ns = max(time.time_ns(), self._last_ns + 1)
        return self._last_ns

    def _drop(self, key: str) -> None:
        """Forget `key` and delete its file (caller holds the lock)."""
        size = self._index.pop(key)
        self._bytes -= size
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError:
            log.warning("could not delete cache file for %s", key, exc_info=True)

    def _evict(self) -> None:
        """Delete least-recently-used entries until the total fits the bound (caller holds the lock or is __init__)."""
        while self._bytes > self._max_bytes:
            self._drop(next(iter(self._index)))

    def get(self, key: str) -> bytes | None:
        """Return the cached PCM or None; a hit makes the entry the most recently used, in memory and on disk."""
        with self._lock:
            if key not in self._index:
                self._misses += 1
                return None
            path = self._path(key)
            try:
                pcm = path.read_bytes()
                stamp = self._stamp()
                os.utime(path, ns=(stamp, stamp))
            except FileNotFoundError:
                log.warning("cache file for %s vanished; treating as a miss", key)
                self._drop(key)
                self._misses += 1
                return None
            self._index.move_to_end(key)
            self._hits += 1
            return pcm

    def put(self, key: str, pcm: bytes) -> None:
        """Store `pcm` under `key` atomically, then evict least-recently-used entries to the bound.

        Raises ValueError for a key that is not 64 lowercase hex digits (keys become file names). An item larger
        than the whole cache is not stored, and any old entry under the key is dropped. A write failure removes
        the temp file and re-raises: no partial entry is ever visible.
        """
        if not _KEY_RE.match(key):
            raise ValueError(f"invalid cache key {key!r}: expected 64 lowercase hex digits")
        if not self._max_bytes:
            return
        if len(pcm) > self._max_bytes:
            log.debug("pcm of %d bytes exceeds cache bound %d; not cached", len(pcm), self._max_bytes)
            with self._lock:
                if key in self._index:
                    self._drop(key)
            return
        # The slow part (write + fsync) runs outside the lock; the temp name is unique, so writers never collide.
        fd, tmp_name = tempfile.mkstemp(dir=self._root, prefix=f".{key}.", suffix=_TMP_SUFFIX)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(pcm)
                f.flush()
                os.fsync(f.fileno())
            with self._lock:
                stamp = self._stamp()
                os.utime(tmp, ns=(stamp, stamp))
                os.replace(tmp, self._path(key))
                old = self._index.pop(key, None)
                if old is not None:
                    self._bytes -= old
                self._index[key] = len(pcm)
                self._bytes += len(pcm)
                self._evict()
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def stats(self) -> dict[str, int]:
        """Return entries, bytes, max_bytes, hits and misses."""
        with self._lock:
            return {
                "entries": len(self._index),
                "bytes": self._bytes,
                "max_bytes": self._max_bytes,
                "hits": self._hits,
                "misses": self._misses,
            }
