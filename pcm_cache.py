"""Disk L2 cache of finished PCM (s16le bytes), bounded in bytes, with atomic writes and checked reads.

Each entry is `<root>/<key>.pcm`: a 32-byte header (magic, PCM length, a 16-byte BLAKE2b digest of the key and the
PCM), then the PCM. Writes go to a unique temp file in `root`, are fsynced, then `os.replace`d, so a crash leaves either
the whole entry or none (plus a `*.tmp` that the next start deletes). Every read checks the length and the digest: an
entry that was cut short, emptied, overwritten, or written by an older version without a header is a miss, and is
removed. Recency lives in memory and in file mtimes, so LRU order survives a restart. One process owns a cache folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger("polytts.cache")

_KEY_RE = re.compile(r"^[0-9a-f]{64}\Z")
_SUFFIX = ".pcm"
_TMP_SUFFIX = ".tmp"
_MAGIC = b"PTTSPCM1"
_HEADER = struct.Struct("<8sQ16s")
ENTRY_HEADER_BYTES = _HEADER.size
"""Bytes each entry takes on disk beyond its PCM; the bound counts them."""


class CacheWriteError(OSError):
    """An entry could not be written (disk full, read-only, ...); nothing partial was left. Its message is one line
    that names the entry and the cause, meant to be logged as is."""


class _BadEntry(Exception):
    """An entry on disk that fails its check."""


def _digest(key: str, pcm: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(key.encode("ascii"))
    h.update(pcm)
    return h.digest()


class PcmCache:
    """Thread-safe LRU of PCM files in `root` whose total size on disk never exceeds `max_bytes` (0 disables it)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self._root = Path(root)
        self._max_bytes = max_bytes
        self._index: OrderedDict[str, int] = OrderedDict()  # key -> size on disk, least recently used first
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._last_ns = 0
        self._lock = threading.Lock()
        self._root.mkdir(parents=True, exist_ok=True)
        if max_bytes:
            self._load()

    def _load(self) -> None:
        """Index existing entries oldest first, delete leftover temp files and entries whose header does not fit
        their size (the digest is checked when an entry is read), evict down to the (maybe new) bound."""
        found: list[tuple[int, str, int]] = []
        rejected = 0
        with os.scandir(self._root) as it:
            for entry in it:
                if not entry.is_file(follow_symlinks=False):
                    continue
                if entry.name.endswith(_TMP_SUFFIX):
                    log.info("removing leftover temp file %s", entry.path)
                    Path(entry.path).unlink(missing_ok=True)
                    continue
                key = entry.name.removesuffix(_SUFFIX)
                if not (entry.name.endswith(_SUFFIX) and _KEY_RE.match(key)):
                    continue
                st = entry.stat(follow_symlinks=False)
                try:
                    with open(entry.path, "rb") as f:
                        _check_header(f.read(ENTRY_HEADER_BYTES), st.st_size)
                except (OSError, _BadEntry):
                    rejected += 1
                    Path(entry.path).unlink(missing_ok=True)
                    continue
                found.append((st.st_mtime_ns, key, st.st_size))
        if rejected:
            log.warning(
                "pcm cache %s: removed %d entries that failed their check (damaged or an older format)",
                self._root,
                rejected,
            )
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
        except OSError as exc:
            log.warning("could not delete cache file for %s: %s", key, exc)

    def _evict(self) -> None:
        """Delete least-recently-used entries until the total fits the bound (caller holds the lock or is __init__)."""
        while self._bytes > self._max_bytes:
            self._drop(next(iter(self._index)))

    def get(self, key: str) -> bytes | None:
        """Return the cached PCM or None; a hit makes the entry the most recently used, in memory and on disk.

        An entry that fails its check (or cannot be read) is a miss, and is removed.
        """
        with self._lock:
            if key not in self._index:
                self._misses += 1
                return None
            path = self._path(key)
            try:
                pcm = _read_entry(path, key)
            except (OSError, _BadEntry) as exc:
                log.warning("pcm cache entry %s is unusable (%s); dropped, served as a miss", key, exc)
                self._drop(key)
                self._misses += 1
                return None
            try:
                stamp = self._stamp()
                os.utime(path, ns=(stamp, stamp))
            except OSError:
                pass  # recency on disk only orders the next start's index
            self._index.move_to_end(key)
            self._hits += 1
            return pcm

    def put(self, key: str, pcm: bytes) -> None:
        """Store `pcm` under `key` atomically, then evict least-recently-used entries to the bound.

        Raises ValueError for a key that is not 64 lowercase hex digits (keys become file names) or PCM of odd
        length (s16le samples are 2 bytes). An entry larger than the whole cache is not stored, and any old entry
        under the key is dropped. A write failure removes the temp file and raises CacheWriteError: no partial
        entry is ever visible.
        """
        if not _KEY_RE.match(key):
            raise ValueError(f"invalid cache key {key!r}: expected 64 lowercase hex digits")
        if not self._max_bytes:
            return
        if len(pcm) % 2:
            raise ValueError(f"s16le PCM has an even length, got {len(pcm)} bytes")
        size = ENTRY_HEADER_BYTES + len(pcm)
        if size > self._max_bytes:
            log.debug("pcm of %d bytes exceeds cache bound %d; not cached", len(pcm), self._max_bytes)
            with self._lock:
                if key in self._index:
                    self._drop(key)
            return
        header = _HEADER.pack(_MAGIC, len(pcm), _digest(key, pcm))
        tmp: Path | None = None
        try:
            # The slow part (write + fsync) runs outside the lock; the temp name is unique, so writers never collide.
            fd, tmp_name = tempfile.mkstemp(dir=self._root, prefix=f".{key}.", suffix=_TMP_SUFFIX)
            tmp = Path(tmp_name)
            with os.fdopen(fd, "wb") as f:
                f.write(header)
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
                self._index[key] = size
                self._bytes += size
                self._evict()
        except BaseException as exc:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise CacheWriteError(
                    exc.errno, f"could not store pcm cache entry {key[:16]}…: {exc.strerror or exc}"
                ) from exc
            raise

    def stats(self) -> dict[str, int]:
        """Return entries, bytes (on disk, headers included), max_bytes, hits and misses."""
        with self._lock:
            return {
                "entries": len(self._index),
                "bytes": self._bytes,
                "max_bytes": self._max_bytes,
                "hits": self._hits,
                "misses": self._misses,
            }


def _check_header(header: bytes, size: int) -> int:
    """The PCM length an entry's header declares, if it fits the file's size; else _BadEntry."""
    if len(header) < ENTRY_HEADER_BYTES or not header.startswith(_MAGIC):
        raise _BadEntry("no entry header")
    _, length, _ = _HEADER.unpack(header)
    if length % 2 or size != ENTRY_HEADER_BYTES + length:
        raise _BadEntry(f"{size} bytes on disk where the header says {ENTRY_HEADER_BYTES + length}")
    return int(length)


def _read_entry(path: Path, key: str) -> bytes:
    with open(path, "rb") as f:
        header = f.read(ENTRY_HEADER_BYTES)
        length = _check_header(header, os.fstat(f.fileno()).st_size)
        pcm = f.read(length)
    if len(pcm) != length or _digest(key, pcm) != header[-16:]:
        raise _BadEntry("checksum mismatch")
    return pcm
