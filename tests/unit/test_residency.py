"""Tests of residency.py: real ManagedUnits whose loaders/freers record calls, and a hand-advanced clock."""

from __future__ import annotations

import importlib
import json
import logging
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gpu import residency


class FakeClock:
    """A monotonic clock that only moves when a test advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Handle:
    """A distinct loaded-model handle per load, so tests can tell loads apart."""

    def __init__(self, name: str, serial: int) -> None:
        self.name = name
        self.serial = serial


Calls = list[tuple[str, str]]


def make_unit(
    name: str,
    calls: Calls,
    policy: Any = None,
    *,
    footprint: int = 0,
    fail_loads: int = 0,
    fail_free: bool = False,
    load_takes: float = 0.0,
    clock: FakeClock | None = None,
) -> Any:
    """A ManagedUnit whose loader/freer append ("load"|"free", name) to `calls`."""
    state = {"serial": 0, "fail_loads": fail_loads}

    def loader() -> object:
        calls.append(("load", name))
        if clock is not None:
            clock.advance(load_takes)
        if state["fail_loads"]:
            state["fail_loads"] -= 1
            raise RuntimeError(f"{name} failed to load")
        state["serial"] += 1
        return Handle(name, state["serial"])

    def freer(handle: object) -> None:
        assert isinstance(handle, Handle) and handle.name == name
        calls.append(("free", name))
        if fail_free:
            raise RuntimeError(f"{name} failed to free")

    return residency.ManagedUnit(
        name=name,
        loader=loader,
        freer=freer,
        footprint=footprint,
        residency_policy=policy or residency.ResidencyPolicy.UNPINNED,
    )


@contextmanager
def reloaded_with(fake: types.ModuleType | None) -> Iterator[types.ModuleType]:
    """Reload residency with `livestack_node` set to `fake` (None: unimportable), then restore the original module.

    Restoring the saved namespace (rather than reloading again) keeps the original class objects, which other
    test modules may already hold.
    """
    saved_namespace = dict(vars(residency))
    had_module = "livestack_node" in sys.modules
    saved_module = sys.modules.get("livestack_node")
    sys.modules["livestack_node"] = fake  # type: ignore[assignment]  # None makes the import raise ImportError
    try:
        yield importlib.reload(residency)
    finally:
        if had_module:
            sys.modules["livestack_node"] = saved_module  # type: ignore[assignment]
        else:
            del sys.modules["livestack_node"]
        vars(residency).clear()
        vars(residency).update(saved_namespace)


@pytest.fixture(autouse=True)
def local_implementation() -> Iterator[None]:
    """Run every test against the local implementation, even on a host with livestack_node installed."""
    if residency.IMPLEMENTATION == "local":
        yield
        return
    with reloaded_with(None):
        yield


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def calls() -> Calls:
    return []


def test_ensure_loads_once_then_returns_cached_handle(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager([make_unit("a", calls)], idle_seconds=60, clock=clock)
    assert manager.handle("a") is None
    first = manager.ensure("a")
    assert manager.ensure("a") is first
    assert manager.handle("a") is first
    assert calls == [("load", "a")]
    assert manager.resident() == ["a"]


def test_one_engine_at_a_time_without_coload(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager([make_unit("a", calls), make_unit("b", calls)], idle_seconds=60, clock=clock)
    manager.ensure("a")
    manager.ensure("b")
    assert calls == [("load", "a"), ("free", "a"), ("load", "b")]
    assert manager.resident() == ["b"]
    assert manager.handle("a") is None
    manager.ensure("a")
    assert manager.resident() == ["a"]
    assert manager.status()["units"]["a"]["loads"] == 2


def test_coload_keeps_both(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager(
        [make_unit("a", calls), make_unit("b", calls)], idle_seconds=60, coload=True, clock=clock
    )
    a = manager.ensure("a")
    b = manager.ensure("b")
    assert calls == [("load", "a"), ("load", "b")]
    assert manager.resident() == ["a", "b"]
    assert manager.ensure("a") is a and manager.ensure("b") is b


def test_load_evicts_unpinned_before_soft_pin_lru_within_group(clock: FakeClock, calls: Calls) -> None:
    policy = residency.ResidencyPolicy
    # Start all three HARD_PIN so they can be co-resident without coload, then give them their real policies.
    units = [make_unit(name, calls, policy.HARD_PIN) for name in ("soft", "u_old", "u_new")]
    manager = residency.ModelManager([*units, make_unit("d", calls)], idle_seconds=600, clock=clock)
    for name in ("soft", "u_new", "u_old"):
        manager.ensure(name)
        clock.advance(1)
    manager.touch("u_new")  # u_new is now the most recently used of the two unpinned units
    manager.set_policy("soft", policy.SOFT_PIN)
    manager.set_policy("u_old", policy.UNPINNED)
    manager.set_policy("u_new", policy.UNPINNED)
    calls.clear()

    manager.ensure("d")

    assert calls == [("free", "u_old"), ("free", "u_new"), ("free", "soft"), ("load", "d")]
    assert manager.resident() == ["d"]


def test_hard_pin_survives_loads_and_idle_but_not_operator(clock: FakeClock, calls: Calls) -> None:
    pinned = make_unit("pinned", calls, residency.ResidencyPolicy.HARD_PIN)
    units = [pinned, make_unit("a", calls), make_unit("b", calls)]
    manager = residency.ModelManager(units, idle_seconds=10, clock=clock)
    manager.ensure("pinned")
    manager.ensure("a")
    manager.ensure("b")
    assert manager.resident() == ["pinned", "b"]
    clock.advance(100)
    assert manager.maybe_evict() == ["b"]
    assert manager.resident() == ["pinned"]
    assert manager.unload_now("pinned") == ["pinned"]
    assert manager.resident() == []
    assert ("free", "pinned") in calls


def test_idle_timer(clock: FakeClock, calls: Calls) -> None:
    policy = residency.ResidencyPolicy
    manager = residency.ModelManager(
        [make_unit("soft", calls, policy.SOFT_PIN), make_unit("free", calls, policy.UNPINNED)],
        idle_seconds=30,
        coload=True,
        clock=clock,
    )
    manager.ensure("soft")
    manager.ensure("free")
    clock.advance(29.5)
    assert manager.maybe_evict() == []
    assert manager.resident() == ["soft", "free"]
    clock.advance(0.5)  # exactly idle_seconds: idle enough
    assert sorted(manager.maybe_evict()) == ["free", "soft"]
    assert manager.resident() == []
    assert manager.maybe_evict() == []


def test_touch_resets_idle_timer(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager([make_unit("a", calls)], idle_seconds=30, clock=clock)
    manager.ensure("a")
    clock.advance(20)
    manager.touch("a")
    clock.advance(20)
    assert manager.maybe_evict() == []
    assert manager.status()["units"]["a"]["idle_s"] == pytest.approx(20)
    clock.advance(10)
    assert manager.maybe_evict() == ["a"]


def test_touch_of_unloaded_unit_is_harmless(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager([make_unit("a", calls)], idle_seconds=30, clock=clock)
    manager.touch("a")
    assert manager.resident() == []
    assert calls == []


def test_loader_failure_leaves_unit_unloaded_and_next_ensure_retries(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager([make_unit("a", calls, fail_loads=1)], idle_seconds=30, clock=clock)
    with pytest.raises(RuntimeError, match="failed to load"):
        manager.ensure("a")
    assert manager.resident() == []
    assert manager.handle("a") is None
    assert manager.status()["units"]["a"]["loads"] == 0
    handle = manager.ensure("a")
    assert isinstance(handle, Handle)
    assert calls == [("load", "a"), ("load", "a")]
    assert manager.resident() == ["a"]


def test_freer_failure_still_marks_not_resident(
    clock: FakeClock, calls: Calls, caplog: pytest.LogCaptureFixture
) -> None:
    manager = residency.ModelManager(
        [make_unit("a", calls, fail_free=True), make_unit("b", calls)], idle_seconds=30, clock=clock
    )
    manager.ensure("a")
    with caplog.at_level(logging.INFO, logger="polytts.residency"):
        manager.ensure("b")
    assert manager.resident() == ["b"]
    assert manager.handle("a") is None
    assert any(r.levelno == logging.ERROR and "freer of a" in r.getMessage() for r in caplog.records)
    assert manager.unload_now("a") == []  # already gone: nothing freed twice
    assert calls.count(("free", "a")) == 1


def test_unload_logs_one_line_with_reason(clock: FakeClock, calls: Calls, caplog: pytest.LogCaptureFixture) -> None:
    manager = residency.ModelManager([make_unit("a", calls), make_unit("b", calls)], idle_seconds=30, clock=clock)
    with caplog.at_level(logging.INFO, logger="polytts.residency"):
        manager.ensure("a")
        manager.ensure("b")
        clock.advance(30)
        manager.maybe_evict()
        manager.ensure("a")
        manager.unload_now()
    unloads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("unloaded")]
    assert unloads == ["unloaded a (evicted for b)", "unloaded b (idle)", "unloaded a (operator)"]


def test_unload_now_named_and_all(clock: FakeClock, calls: Calls) -> None:
    policy = residency.ResidencyPolicy
    manager = residency.ModelManager(
        [make_unit("a", calls, policy.HARD_PIN), make_unit("b", calls, policy.SOFT_PIN), make_unit("c", calls)],
        idle_seconds=30,
        coload=True,
        clock=clock,
    )
    for name in ("a", "b", "c"):
        manager.ensure(name)
    assert manager.unload_now("b") == ["b"]
    assert manager.resident() == ["a", "c"]
    assert manager.unload_now("b") == []
    assert manager.unload_now() == ["a", "c"]
    assert manager.resident() == []
    assert manager.unload_now() == []
    assert sorted(call for call in calls if call[0] == "free") == [("free", "a"), ("free", "b"), ("free", "c")]


def test_status_fields(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager(
        [
            make_unit("a", calls, footprint=123, load_takes=2.5, clock=clock),
            make_unit("b", calls, residency.ResidencyPolicy.SOFT_PIN),
        ],
        idle_seconds=45,
        clock=clock,
    )
    manager.ensure("a")
    clock.advance(4)
    status = manager.status()
    json.dumps(status)  # JSON-able as is
    assert status["coload"] is False
    assert status["idle_seconds"] == 45
    assert status["implementation"] == "local"
    assert status["units"]["a"] == {
        "resident": True,
        "policy": "unpinned",
        "footprint": 123,
        "idle_s": pytest.approx(4),
        "loads": 1,
        "evictions": 0,
        "last_load_s": pytest.approx(2.5),
    }
    assert status["units"]["b"] == {
        "resident": False,
        "policy": "soft_pin",
        "footprint": 0,
        "idle_s": None,
        "loads": 0,
        "evictions": 0,
        "last_load_s": None,
    }
    manager.ensure("b")
    manager.set_policy("b", residency.ResidencyPolicy.HARD_PIN)
    units = manager.status()["units"]
    assert units["a"]["resident"] is False and units["a"]["evictions"] == 1 and units["a"]["idle_s"] is None
    assert units["b"]["policy"] == "hard_pin"


def test_unknown_name_is_key_error(clock: FakeClock, calls: Calls) -> None:
    manager = residency.ModelManager([make_unit("a", calls)], idle_seconds=30, clock=clock)
    for call in (
        lambda: manager.ensure("nope"),
        lambda: manager.touch("nope"),
        lambda: manager.handle("nope"),
        lambda: manager.unload_now("nope"),
        lambda: manager.set_policy("nope", residency.ResidencyPolicy.HARD_PIN),
    ):
        with pytest.raises(KeyError):
            call()
    assert calls == []


def test_status_does_not_wait_for_a_load(clock: FakeClock) -> None:
    """status() is read from the event loop; a long load on the GPU thread must not block it."""
    started, release = threading.Event(), threading.Event()

    def slow_loader() -> object:
        started.set()
        release.wait(5)
        return "handle"

    unit = residency.ManagedUnit(name="slow", loader=slow_loader, freer=lambda handle: None)
    manager = residency.ModelManager([unit], idle_seconds=30, clock=clock)
    loading = threading.Thread(target=manager.ensure, args=("slow",))
    loading.start()
    try:
        assert started.wait(5)
        reader = threading.Thread(target=manager.status)
        reader.start()
        reader.join(2)
        assert not reader.is_alive()
        assert manager.resident() == []
    finally:
        release.set()
        loading.join(5)
    assert manager.handle("slow") == "handle"


def test_duplicate_unit_names_are_rejected(calls: Calls) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        residency.ModelManager([make_unit("a", calls), make_unit("a", calls)], idle_seconds=30)


def test_livestack_node_is_reexported_when_installed() -> None:
    fake = types.ModuleType("livestack_node")

    class ResidencyPolicy:
        pass

    class ManagedUnit:
        pass

    class ModelManager:
        pass

    fake.ResidencyPolicy = ResidencyPolicy  # type: ignore[attr-defined]
    fake.ManagedUnit = ManagedUnit  # type: ignore[attr-defined]
    fake.ModelManager = ModelManager  # type: ignore[attr-defined]
    local_manager = residency.ModelManager

    with reloaded_with(fake) as module:
        assert module.IMPLEMENTATION == "livestack_node"
        assert module.ResidencyPolicy is ResidencyPolicy
        assert module.ManagedUnit is ManagedUnit
        assert module.ModelManager is ModelManager

    assert residency.IMPLEMENTATION == "local"
    assert residency.ModelManager is local_manager
    assert sys.modules.get("livestack_node") is not fake


def test_incomplete_livestack_node_falls_back_to_local() -> None:
    fake = types.ModuleType("livestack_node")  # lacks the API: the import of its names fails
    with reloaded_with(fake) as module:
        assert module.IMPLEMENTATION == "local"
        assert module.ModelManager.__module__ == "gpu.residency"
