"""Which models stay in device memory, and when they leave it.

The livestack-node-compatible shim: when the fleet package `livestack_node` is installed, its `ResidencyPolicy`,
`ManagedUnit` and `ModelManager` are re-exported unchanged (so a fleet host and this service agree on residency);
otherwise the local implementation below provides the same API. `IMPLEMENTATION` says which one is live. An unload
gives cached device memory back with `engines.device.free_cuda`, as the engines' own unloads do.

Loads and unloads run outside the manager's lock, so `status()`, read from the event loop, never waits for a model
load that can take tens of seconds; only one load/unload transition runs at a time.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from engines.device import free_cuda

log = logging.getLogger("polytts.residency")


class ResidencyPolicy(enum.Enum):
    """How readily a resident unit gives its device memory back."""

    HARD_PIN = "hard_pin"  # never evicted by idle time or by another unit's load
    SOFT_PIN = "soft_pin"  # evicted by idle time, and by another unit's load only after every UNPINNED unit
    UNPINNED = "unpinned"


@dataclass
class ManagedUnit:
    """One loadable model: how to load it, how to free it, and how it should be kept."""

    name: str
    loader: Callable[[], object]  # loads the model, returns its handle
    freer: Callable[[object], None]  # receives the handle; must release device memory
    footprint: int = 0  # bytes of device memory when resident (measured estimate, for status)
    residency_policy: ResidencyPolicy = ResidencyPolicy.UNPINNED


class _Slot:
    """The manager's bookkeeping for one unit."""

    def __init__(self, unit: ManagedUnit) -> None:
        self.unit = unit
        self.handle: object | None = None
        self.resident = False
        self.last_used: float = 0.0
        self.loads = 0
        self.evictions = 0
        self.last_load_s: float | None = None


# Eviction by another unit's load: UNPINNED go first, then SOFT_PIN; HARD_PIN never.
_EVICTION_RANK = {ResidencyPolicy.UNPINNED: 0, ResidencyPolicy.SOFT_PIN: 1}


class ModelManager:
    """Loads units on demand, evicts them on idle time or to make room, and reports what is resident."""

    def __init__(
        self,
        units: Iterable[ManagedUnit],
        idle_seconds: float,
        coload: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._slots: dict[str, _Slot] = {}
        for unit in units:
            if unit.name in self._slots:
                raise ValueError(f"duplicate managed unit name: {unit.name!r}")
            self._slots[unit.name] = _Slot(unit)
        self._idle_seconds = idle_seconds
        self._coload = coload
        self._clock = clock
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._busy = False  # a load/unload transition is running (outside the lock)
        self._order: list[str] = []  # resident names, in load order

    def ensure(self, name: str) -> object:
        """Return the unit's handle, loading it (and, unless coload, evicting the others) if it is not resident."""
        slot = self._slot(name)
        with self._transition():
            with self._lock:
                if slot.resident:
                    slot.last_used = self._clock()
                    return slot.handle
                victims = [] if self._coload else self._load_victims()
            for victim in victims:
                self._unload(victim, f"evicted for {name}")
            started = self._clock()
            try:
                handle = slot.unit.loader()
            except Exception as exc:
                # The caller reports the failure (with a traceback where it is unexpected).
                log.warning("loading %s failed; it stays unloaded: %s", name, exc)
                raise
            with self._lock:
                now = self._clock()
                slot.handle = handle
                slot.resident = True
                slot.last_used = now
                slot.loads += 1
                slot.last_load_s = now - started
                self._order.append(name)
            log.info("loaded %s in %.2fs", name, slot.last_load_s)
            return handle

    def touch(self, name: str) -> None:
        """Mark a resident unit used now, so a long generation is not idled out between chunks."""
        slot = self._slot(name)
        with self._lock:
            if slot.resident:
                slot.last_used = self._clock()

    def maybe_evict(self) -> list[str]:
        """Unload every resident unit that is not HARD_PIN and has been idle for at least `idle_seconds`."""
        with self._transition():
            with self._lock:
                now = self._clock()
                idle = [
                    self._slots[name]
                    for name in self._order
                    if self._slots[name].unit.residency_policy is not ResidencyPolicy.HARD_PIN
                    and now - self._slots[name].last_used >= self._idle_seconds
                ]
            for slot in idle:
                self._unload(slot, "idle")
            return [slot.unit.name for slot in idle]

    def unload_now(self, name: str | None = None) -> list[str]:
        """Operator action: unload the named unit, or every resident unit, whatever its policy."""
        named = self._slot(name) if name is not None else None
        with self._transition():
            with self._lock:
                if named is not None:
                    targets = [named] if named.resident else []
                else:
                    targets = [self._slots[n] for n in self._order]
            for slot in targets:
                self._unload(slot, "operator")
            return [slot.unit.name for slot in targets]

    def resident(self) -> list[str]:
        """Names of resident units, in load order."""
        with self._lock:
            return list(self._order)

    def handle(self, name: str) -> object | None:
        """The loaded handle, or None when not resident; never loads."""
        slot = self._slot(name)
        with self._lock:
            return slot.handle if slot.resident else None

    def set_policy(self, name: str, policy: ResidencyPolicy) -> None:
        """Change a unit's residency policy; it applies from the next eviction decision."""
        slot = self._slot(name)
        with self._lock:
            slot.unit.residency_policy = policy

    def status(self) -> dict[str, Any]:
        """A JSON-able snapshot for /health and the operator."""
        with self._lock:
            now = self._clock()
            units = {
                name: {
                    "resident": slot.resident,
                    "policy": slot.unit.residency_policy.value,
                    "footprint": slot.unit.footprint,
                    "idle_s": now - slot.last_used if slot.resident else None,
                    "loads": slot.loads,
                    "evictions": slot.evictions,
                    "last_load_s": slot.last_load_s,
                }
                for name, slot in self._slots.items()
            }
            return {
                "coload": self._coload,
                "idle_seconds": self._idle_seconds,
                "implementation": "local",
                "units": units,
            }

    def _slot(self, name: str) -> _Slot:
        try:
            return self._slots[name]
        except KeyError:
            raise KeyError(f"unknown managed unit: {name!r}") from None

    @contextmanager
    def _transition(self) -> Iterator[None]:
        """Claim the single load/unload transition; model work then runs without holding the lock."""
        with self._cond:
            while self._busy:
                self._cond.wait()
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _load_victims(self) -> list[_Slot]:
        """Resident units a load must evict: UNPINNED before SOFT_PIN, least recently used first."""
        candidates = [self._slots[n] for n in self._order if self._slots[n].unit.residency_policy in _EVICTION_RANK]
        return sorted(candidates, key=lambda s: (_EVICTION_RANK[s.unit.residency_policy], s.last_used))

    def _unload(self, slot: _Slot, reason: str) -> None:
        """Free one resident unit; called inside a transition, without the lock."""
        name = slot.unit.name
        with self._lock:
            handle = slot.handle
        try:
            slot.unit.freer(handle)
        except Exception:
            log.exception("freer of %s raised; marking it not resident anyway", name)
        with self._lock:
            slot.handle = None
            slot.resident = False
            slot.evictions += 1
            self._order.remove(name)
        # Drop our last reference before collecting, so the handle itself can be reclaimed.
        del handle
        free_cuda()
        log.info("unloaded %s (%s)", name, reason)


IMPLEMENTATION = "local"
attach: Callable[..., Any] | None = None
"""`livestack_node.attach` when the installed fleet package provides it (see fleet.py), else None."""
try:
    # The fleet's classes replace the local ones defined above (hence no-redef) for every importer of this module
    # (re-exports, hence F401).
    from livestack_node import (  # type: ignore[no-redef]  # noqa: F401
        ManagedUnit,
        ModelManager,
        ResidencyPolicy,
    )

    IMPLEMENTATION = "livestack_node"
    import livestack_node

    attach = getattr(livestack_node, "attach", None)
except ImportError:
    pass  # the fleet package is absent on this host: the local classes above are the API
