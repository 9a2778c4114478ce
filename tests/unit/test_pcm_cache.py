"""Tests of the disk PCM cache on real files: bound, LRU order, restart, atomic writes, checked reads."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import random
import threading
from pathlib import Path

import pytest

from pcm_cache import ENTRY_HEADER_BYTES, CacheWriteError, PcmCache

H = ENTRY_HEADER_BYTES


def k(name: str) -> str:
    """A valid cache key derived from a readable name."""
    return hashlib.sha256(name.encode()).hexdigest()


def files_in(root: Path) -> set[str]:
    return {p.name for p in root.iterdir()}


def test_round_trip(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path / "pcm", 1000)
    pcm = bytes(range(256)) * 2
    assert cache.get(k("a")) is None
    cache.put(k("a"), pcm)
    assert cache.get(k("a")) == pcm
    assert files_in(tmp_path / "pcm") == {f"{k('a')}.pcm"}
    assert (tmp_path / "pcm" / f"{k('a')}.pcm").stat().st_size == H + 512
    assert cache.stats() == {"entries": 1, "bytes": H + 512, "max_bytes": 1000, "hits": 1, "misses": 1}


def test_bound_with_lru_eviction_and_get_refreshes(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 3 * (H + 10))
    for name in "abc":
        cache.put(k(name), name.encode() * 10)
    assert cache.get(k("a")) == b"a" * 10  # b is now the oldest
    cache.put(k("d"), b"d" * 10)
    assert cache.get(k("b")) is None
    assert files_in(tmp_path) == {f"{k(n)}.pcm" for n in "acd"}
    assert cache.stats()["bytes"] == 3 * (H + 10)


def test_replace_updates_bytes(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 100)
    cache.put(k("a"), b"x" * 40)
    cache.put(k("a"), b"y" * 16)
    assert cache.get(k("a")) == b"y" * 16
    assert cache.stats()["bytes"] == H + 16
    assert cache.stats()["entries"] == 1


def test_oversize_not_stored(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, H + 10)
    cache.put(k("small"), b"s" * 6)
    cache.put(k("big"), b"b" * 12)
    assert cache.get(k("big")) is None
    assert cache.get(k("small")) == b"s" * 6
    assert files_in(tmp_path) == {f"{k('small')}.pcm"}


@pytest.mark.parametrize("key", ["", "abc", "../" + "a" * 61, "A" * 64, "g" * 64, k("a") + ".pcm", k("a")[:-1]])
def test_invalid_key_rejected(tmp_path: Path, key: str) -> None:
    cache = PcmCache(tmp_path / "pcm", 100)
    with pytest.raises(ValueError):
        cache.put(key, b"x")
    assert files_in(tmp_path) == {"pcm"}
    assert files_in(tmp_path / "pcm") == set()


def test_restart_keeps_entries_and_order(tmp_path: Path) -> None:
    first = PcmCache(tmp_path, 3 * (H + 10))
    for name in "abc":
        first.put(k(name), name.encode() * 10)
    first.get(k("a"))  # order now b, c, a
    second = PcmCache(tmp_path, 3 * (H + 10))
    assert second.stats()["entries"] == 3
    assert second.stats()["bytes"] == 3 * (H + 10)
    second.put(k("d"), b"d" * 10)
    assert second.get(k("b")) is None
    assert [n for n in "acd" if second.get(k(n)) is not None] == ["a", "c", "d"]


def test_leftover_temp_files_removed_at_start(tmp_path: Path) -> None:
    (tmp_path / f".{k('a')}.x1y2.tmp").write_bytes(b"partial")
    (tmp_path / "other.tmp").write_bytes(b"partial")
    PcmCache(tmp_path, 100).put(k("b"), b"b" * 10)
    (tmp_path / "README.txt").write_text("not ours")
    cache = PcmCache(tmp_path, 100)
    assert files_in(tmp_path) == {f"{k('b')}.pcm", "README.txt"}
    assert cache.stats()["entries"] == 1
    assert cache.stats()["bytes"] == H + 10
    assert cache.get(k("b")) == b"b" * 10


def test_shrinking_bound_at_restart_evicts_oldest(tmp_path: Path) -> None:
    first = PcmCache(tmp_path, 4 * (H + 10))
    for name in "abcd":
        first.put(k(name), name.encode() * 10)
    first.get(k("a"))  # order now b, c, d, a
    second = PcmCache(tmp_path, 2 * (H + 10))
    assert files_in(tmp_path) == {f"{k('d')}.pcm", f"{k('a')}.pcm"}
    assert second.stats()["bytes"] == 2 * (H + 10)
    assert second.get(k("a")) == b"a" * 10


@pytest.mark.parametrize("target", ["fsync", "replace"])
def test_write_failure_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    cache = PcmCache(tmp_path, 100)

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("injected: disk full")

    monkeypatch.setattr(os, target, fail)
    with pytest.raises(CacheWriteError, match="injected"):
        cache.put(k("a"), b"x" * 10)
    monkeypatch.undo()
    assert files_in(tmp_path) == set()
    assert cache.get(k("a")) is None
    assert cache.stats()["entries"] == 0
    assert cache.stats()["bytes"] == 0


def test_file_deleted_by_hand_is_a_miss(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 100)
    cache.put(k("a"), b"x" * 10)
    (tmp_path / f"{k('a')}.pcm").unlink()
    assert cache.get(k("a")) is None
    assert cache.stats()["entries"] == 0
    assert cache.stats()["bytes"] == 0
    cache.put(k("a"), b"y" * 10)
    assert cache.get(k("a")) == b"y" * 10


def test_disabled_stores_nothing_and_leaves_files(tmp_path: Path) -> None:
    existing = tmp_path / f"{k('a')}.pcm"
    existing.write_bytes(b"x" * 10)
    cache = PcmCache(tmp_path, 0)
    cache.put(k("b"), b"y")
    assert cache.get(k("a")) is None
    assert cache.get(k("b")) is None
    assert files_in(tmp_path) == {existing.name}
    assert cache.stats() == {"entries": 0, "bytes": 0, "max_bytes": 0, "hits": 0, "misses": 2}


def test_concurrent_puts_and_gets_keep_disk_and_accounting_in_step(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 3000 + 20 * H)
    keys = [k(str(i)) for i in range(20)]
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(200):
                key = rng.choice(keys)
                if rng.random() < 0.5:
                    cache.put(key, bytes(2 * rng.randint(1, 200)))
                else:
                    cache.get(key)
        except BaseException as exc:  # surfaced below: a thread's exception would otherwise be lost
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    on_disk = {p.name: p.stat().st_size for p in tmp_path.iterdir()}
    assert all(name.endswith(".pcm") for name in on_disk)
    assert cache.stats()["entries"] == len(on_disk)
    assert cache.stats()["bytes"] == sum(on_disk.values()) <= 3000 + 20 * H


# --- checked reads: a damaged entry is a miss, and is removed ------------------------------------------------------

PCM = bytes(range(256)) * 8


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "odd length": lambda p: p.write_bytes(p.read_bytes()[:-1]),
    "random bytes": lambda p: p.write_bytes(os.urandom(p.stat().st_size)),
    "one flipped bit of audio": _flip_last_byte,
    "bad magic": lambda p: p.write_bytes(b"X" + p.read_bytes()[1:]),
    "old format (bare PCM)": lambda p: p.write_bytes(PCM),
    "header says less": lambda p: p.write_bytes(
        p.read_bytes()[:8] + (len(PCM) - 2).to_bytes(8, "little") + p.read_bytes()[16:]
    ),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("damage", list(DAMAGE.values()), ids=list(DAMAGE))
def test_a_damaged_entry_is_a_miss_and_is_removed(
    tmp_path: Path, damage: object, caplog: pytest.LogCaptureFixture
) -> None:
    cache = PcmCache(tmp_path, 100_000)
    cache.put(k("a"), PCM)
    cache.put(k("b"), PCM[:100])
    damage(tmp_path / f"{k('a')}.pcm")  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="polytts.cache"):
        assert cache.get(k("a")) is None
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) >= 1
    assert all(r.exc_info is None for r in caplog.records)
    if not (tmp_path / f"{k('a')}.pcm").is_dir():
        assert files_in(tmp_path) == {f"{k('b')}.pcm"}
    assert cache.stats()["entries"] == 1 and cache.stats()["bytes"] == H + 100
    assert cache.stats()["misses"] == 1 and cache.stats()["hits"] == 0
    assert cache.get(k("b")) == PCM[:100]


def test_an_entry_copied_under_another_key_is_a_miss(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 100_000)
    cache.put(k("a"), PCM)
    cache.put(k("b"), PCM[::-1])
    (tmp_path / f"{k('a')}.pcm").write_bytes((tmp_path / f"{k('b')}.pcm").read_bytes())
    assert cache.get(k("a")) is None
    assert cache.get(k("b")) == PCM[::-1]


@pytest.mark.parametrize("damage", list(DAMAGE.values())[:-1], ids=list(DAMAGE)[:-1])
def test_damaged_entries_are_checked_again_after_a_restart(tmp_path: Path, damage: object) -> None:
    first = PcmCache(tmp_path, 100_000)
    first.put(k("a"), PCM)
    first.put(k("b"), PCM[:100])
    damage(tmp_path / f"{k('a')}.pcm")  # type: ignore[operator]
    second = PcmCache(tmp_path, 100_000)
    assert second.get(k("a")) is None
    assert second.get(k("b")) == PCM[:100]
    assert files_in(tmp_path) == {f"{k('b')}.pcm"}
    assert second.stats()["entries"] == 1 and second.stats()["bytes"] == H + 100


def test_old_format_entries_are_removed_at_start_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in "abcde":
        (tmp_path / f"{k(name)}.pcm").write_bytes(PCM)  # what the landed version wrote: bare PCM
    with caplog.at_level(logging.INFO, logger="polytts.cache"):
        cache = PcmCache(tmp_path, 100_000)
    assert files_in(tmp_path) == set() and cache.stats()["entries"] == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "removed 5 entries" in warnings[0]
    cache.put(k("a"), PCM)
    assert cache.get(k("a")) == PCM


def test_a_failed_write_is_one_clear_oserror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PcmCache(tmp_path, 100_000)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CacheWriteError) as exc:
        cache.put(k("a"), PCM)
    assert isinstance(exc.value, OSError) and exc.value.errno == errno.ENOSPC
    assert "\n" not in str(exc.value) and k("a")[:16] in str(exc.value) and "No space left" in str(exc.value)
    monkeypatch.undo()
    assert files_in(tmp_path) == set() and cache.stats()["bytes"] == 0


def test_odd_length_pcm_and_keys_with_a_newline_are_refused(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 100_000)
    with pytest.raises(ValueError, match="even length"):
        cache.put(k("a"), b"abc")
    with pytest.raises(ValueError, match="invalid cache key"):
        cache.put(k("a") + "\n", b"ab")
    assert files_in(tmp_path) == set()
