"""Tests of the disk PCM cache on real files: bound, LRU order, restart, atomic writes."""

from __future__ import annotations

import hashlib
import os
import random
import threading
from pathlib import Path

import pytest

from pcm_cache import PcmCache


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
    assert cache.stats() == {"entries": 1, "bytes": 512, "max_bytes": 1000, "hits": 1, "misses": 1}


def test_bound_with_lru_eviction_and_get_refreshes(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 30)
    for name in "abc":
        cache.put(k(name), name.encode() * 10)
    assert cache.get(k("a")) == b"a" * 10  # b is now the oldest
    cache.put(k("d"), b"d" * 10)
    assert cache.get(k("b")) is None
    assert files_in(tmp_path) == {f"{k(n)}.pcm" for n in "acd"}
    assert cache.stats()["bytes"] == 30


def test_replace_updates_bytes(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 100)
    cache.put(k("a"), b"x" * 40)
    cache.put(k("a"), b"y" * 15)
    assert cache.get(k("a")) == b"y" * 15
    assert cache.stats()["bytes"] == 15
    assert cache.stats()["entries"] == 1


def test_oversize_not_stored(tmp_path: Path) -> None:
    cache = PcmCache(tmp_path, 10)
    cache.put(k("small"), b"s" * 5)
    cache.put(k("big"), b"b" * 11)
    assert cache.get(k("big")) is None
    assert cache.get(k("small")) == b"s" * 5
    assert files_in(tmp_path) == {f"{k('small')}.pcm"}


@pytest.mark.parametrize("key", ["", "abc", "../" + "a" * 61, "A" * 64, "g" * 64, k("a") + ".pcm", k("a")[:-1]])
def test_invalid_key_rejected(tmp_path: Path, key: str) -> None:
    cache = PcmCache(tmp_path / "pcm", 100)
    with pytest.raises(ValueError):
        cache.put(key, b"x")
    assert files_in(tmp_path) == {"pcm"}
    assert files_in(tmp_path / "pcm") == set()


def test_restart_keeps_entries_and_order(tmp_path: Path) -> None:
    first = PcmCache(tmp_path, 30)
    for name in "abc":
        first.put(k(name), name.encode() * 10)
    first.get(k("a"))  # order now b, c, a
    second = PcmCache(tmp_path, 30)
    assert second.stats()["entries"] == 3
    assert second.stats()["bytes"] == 30
    second.put(k("d"), b"d" * 10)
    assert second.get(k("b")) is None
    assert [n for n in "acd" if second.get(k(n)) is not None] == ["a", "c", "d"]


def test_leftover_temp_files_removed_at_start(tmp_path: Path) -> None:
    (tmp_path / f".{k('a')}.x1y2.tmp").write_bytes(b"partial")
    (tmp_path / "other.tmp").write_bytes(b"partial")
    (tmp_path / f"{k('b')}.pcm").write_bytes(b"b" * 10)
    (tmp_path / "README.txt").write_text("not ours")
    cache = PcmCache(tmp_path, 100)
    assert files_in(tmp_path) == {f"{k('b')}.pcm", "README.txt"}
    assert cache.stats()["entries"] == 1
    assert cache.stats()["bytes"] == 10
    assert cache.get(k("b")) == b"b" * 10


def test_shrinking_bound_at_restart_evicts_oldest(tmp_path: Path) -> None:
    first = PcmCache(tmp_path, 100)
    for name in "abcd":
        first.put(k(name), name.encode() * 10)
    first.get(k("a"))  # order now b, c, d, a
    second = PcmCache(tmp_path, 20)
    assert files_in(tmp_path) == {f"{k('d')}.pcm", f"{k('a')}.pcm"}
    assert second.stats()["bytes"] == 20
    assert second.get(k("a")) == b"a" * 10


@pytest.mark.parametrize("target", ["fsync", "replace"])
def test_write_failure_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    cache = PcmCache(tmp_path, 100)

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("injected: disk full")

    monkeypatch.setattr(os, target, fail)
    with pytest.raises(OSError, match="injected"):
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
    cache = PcmCache(tmp_path, 3000)
    keys = [k(str(i)) for i in range(20)]
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(200):
                key = rng.choice(keys)
                if rng.random() < 0.5:
                    cache.put(key, bytes(rng.randint(1, 400)))
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
    assert cache.stats()["bytes"] == sum(on_disk.values()) <= 3000
