"""Tests of the shared cache key and the in-memory WAV LRU."""

from __future__ import annotations

import random
import threading

import pytest

from cache import MemoryCache, synthesis_key

BASE: dict[str, object] = {
    "text": "Hello, world.",
    "voice_id": "alice",
    "engine": "kokoro",
    "checkpoint": "kokoro-v1.0",
    "params": {"speed": 1.0, "language": "en", "seed": 7},
}


def key_of(**changes: object) -> str:
    fields = {**BASE, **changes}
    return synthesis_key(**fields)  # type: ignore[arg-type]


def test_synthesis_key_is_stable_sha256_hex() -> None:
    first = key_of()
    assert first == key_of()
    assert len(first) == 64 and all(c in "0123456789abcdef" for c in first)


@pytest.mark.parametrize(
    ("field", "value"),
    [("text", "Hello, world!"), ("voice_id", "bob"), ("engine", "voxcpm"), ("checkpoint", "kokoro-v1.1")],
)
def test_synthesis_key_changes_with_each_field(field: str, value: str) -> None:
    assert key_of(**{field: value}) != key_of()


@pytest.mark.parametrize(
    "params",
    [
        {"speed": 1.1, "language": "en", "seed": 7},
        {"speed": 1.0, "language": "fr", "seed": 7},
        {"speed": 1.0, "language": "en", "seed": 8},
        {"speed": 1.0, "language": "en"},
        {"speed": 1.0, "language": "en", "seed": 7, "temperature": 0.7},
    ],
)
def test_synthesis_key_changes_with_each_param(params: dict[str, object]) -> None:
    assert key_of(params=params) != key_of()


def test_synthesis_key_ignores_params_order() -> None:
    assert key_of(params={"seed": 7, "language": "en", "speed": 1.0}) == key_of()


def test_synthesis_key_does_not_confuse_fields() -> None:
    # Moving a value from one field to another must not collide (no naive concatenation).
    assert key_of(text="ab", voice_id="c") != key_of(text="a", voice_id="bc")


def test_synthesis_key_accepts_non_ascii_and_lone_surrogates() -> None:
    assert key_of(text="你好") != key_of(text="您好")
    assert key_of(text="\ud800") != key_of(text="\ud801")


def test_get_put_round_trip_and_stats() -> None:
    cache = MemoryCache(100)
    assert cache.get("a") is None
    cache.put("a", b"x" * 10)
    assert cache.get("a") == b"x" * 10
    assert cache.get("a") == b"x" * 10
    assert cache.stats() == {"entries": 1, "bytes": 10, "max_bytes": 100, "hits": 2, "misses": 1}


def test_lru_eviction_and_get_refreshes() -> None:
    cache = MemoryCache(30)
    cache.put("a", b"a" * 10)
    cache.put("b", b"b" * 10)
    cache.put("c", b"c" * 10)
    assert cache.get("a") is not None  # a is now most recent; b is the oldest
    cache.put("d", b"d" * 10)
    assert cache.get("b") is None
    assert [k for k in "acd" if cache.get(k) is not None] == ["a", "c", "d"]
    assert cache.stats()["bytes"] == 30


def test_eviction_frees_enough_for_a_large_item() -> None:
    cache = MemoryCache(30)
    for k in "abc":
        cache.put(k, b"." * 10)
    cache.put("big", b"." * 25)
    assert cache.stats()["entries"] == 1
    assert cache.get("big") is not None


def test_byte_bound_holds_after_many_puts() -> None:
    rng = random.Random(1)
    cache = MemoryCache(1000)
    for i in range(500):
        cache.put(f"k{i}", bytes(rng.randint(1, 300)))
        assert cache.stats()["bytes"] <= 1000
    stats = cache.stats()
    assert stats["bytes"] == sum(len(v) for i in range(500) if (v := cache.get(f"k{i}")) is not None)


def test_oversize_item_not_stored() -> None:
    cache = MemoryCache(10)
    cache.put("small", b"s" * 5)
    cache.put("big", b"b" * 11)
    assert cache.get("big") is None
    assert cache.get("small") == b"s" * 5
    assert cache.stats()["bytes"] == 5


def test_oversize_replacement_drops_old_value() -> None:
    cache = MemoryCache(10)
    cache.put("k", b"old")
    cache.put("k", b"n" * 11)
    assert cache.get("k") is None
    assert cache.stats()["bytes"] == 0


def test_replacing_a_key_updates_bytes() -> None:
    cache = MemoryCache(100)
    cache.put("k", b"x" * 40)
    cache.put("k", b"y" * 15)
    assert cache.get("k") == b"y" * 15
    assert cache.stats()["entries"] == 1
    assert cache.stats()["bytes"] == 15


def test_replacing_a_key_makes_it_most_recent() -> None:
    cache = MemoryCache(20)
    cache.put("a", b"a" * 10)
    cache.put("b", b"b" * 10)
    cache.put("a", b"A" * 10)
    cache.put("c", b"c" * 10)
    assert cache.get("b") is None
    assert cache.get("a") == b"A" * 10


def test_exact_fit_is_stored() -> None:
    cache = MemoryCache(10)
    cache.put("k", b"x" * 10)
    assert cache.get("k") == b"x" * 10


def test_disabled_cache_stores_nothing() -> None:
    cache = MemoryCache(0)
    cache.put("k", b"x")
    assert cache.get("k") is None
    assert cache.stats() == {"entries": 0, "bytes": 0, "max_bytes": 0, "hits": 0, "misses": 1}


def test_negative_bound_rejected() -> None:
    with pytest.raises(ValueError):
        MemoryCache(-1)


def test_clear_empties_but_keeps_counters() -> None:
    cache = MemoryCache(100)
    cache.put("k", b"x" * 10)
    cache.get("k")
    cache.clear()
    assert cache.get("k") is None
    assert cache.stats() == {"entries": 0, "bytes": 0, "max_bytes": 100, "hits": 1, "misses": 1}


def test_concurrent_puts_and_gets_keep_accounting_exact() -> None:
    cache = MemoryCache(5000)
    keys = [f"k{i}" for i in range(40)]
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(2000):
                key = rng.choice(keys)
                if rng.random() < 0.5:
                    cache.put(key, bytes(rng.randint(1, 400)))
                else:
                    cache.get(key)
        except BaseException as exc:  # surfaced below: a thread's exception would otherwise be lost
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = cache.stats()
    values = [v for k in keys if (v := cache.get(k)) is not None]
    assert stats["bytes"] == sum(len(v) for v in values) <= 5000
    assert stats["entries"] == len(values)
