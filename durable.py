"""Files that survive a crash or a power cut: written in full and flushed to disk, renamed into place, the rename
itself made durable. The one low-level helper of every store that writes files (voices, lexicons, jobs, the engines'
prepared artefacts); each store keeps its own temporary names and its own refusals."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def write_synced(path: Path | str, data: bytes | Iterable[bytes]) -> int:
    """Write `data` (bytes, or parts of it in order) to `path`, flushed to disk before returning; the bytes written."""
    written = 0
    with open(path, "wb") as f:
        for part in [data] if isinstance(data, bytes) else data:
            f.write(part)
            written += len(part)
        f.flush()
        os.fsync(f.fileno())
    return written


def replace_synced(source: Path | str, target: Path) -> None:
    """Rename `source` onto `target` (atomically: a reader sees the old file or the new one) and make it durable."""
    os.replace(source, target)
    fsync_dir(target.parent)


def fsync_dir(path: Path) -> None:
    """Make renames inside `path` durable; some platforms cannot open a folder for this, which is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
