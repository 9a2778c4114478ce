"""The engines this node runs, whether each is ready, and the model manager that keeps them in device memory.

An engine is `idle` (not loaded yet), `warming` (loading on the GPU thread), `ready`, or `failed` (with the reason).
A failed engine answers 503 for `POLYTTS_RETRY_AFTER_SECONDS`; the first request after that starts a new load.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from engines.base import Engine, EngineLoadError, EngineSpec
from errors import InvalidInput, NotFound, ServiceError, Unavailable
from gpu.gpu_thread import GpuThread
from gpu.residency import ManagedUnit, ModelManager, ResidencyPolicy
from settings import Settings

log = logging.getLogger("polytts.engines")


EngineStatus = Literal["idle", "warming", "ready", "failed"]


@dataclass
class EngineState:
    """Readiness of one engine as /health and the routes see it."""

    status: EngineStatus = "idle"
    reason: str | None = None
    since: float = field(default_factory=time.monotonic)


def build_engines(settings: Settings, specs: Iterable[EngineSpec[Any]]) -> dict[str, Engine]:
    """The engine each family's factory makes for this node, from the family's own settings and what every engine
    reads of the service's; families it cannot run are left out."""
    context = settings.engine_context()
    engines = {}
    for spec in specs:
        engine = spec.build(spec.own_settings(settings), context)
        if engine is not None:
            engines[spec.family] = engine
    return engines


class EnginePool:
    def __init__(
        self,
        settings: Settings,
        engines: dict[str, Engine],
        gpu: GpuThread,
        on_loaded: Callable[[str, float], None] = lambda engine, seconds: None,
    ) -> None:
        """`on_loaded`: told each engine's name and how many seconds its load took, once it loaded (the metrics
        count loads there: the pool knows nothing of them)."""
        self.settings = settings
        self.engines = engines
        self.gpu = gpu
        self.on_loaded = on_loaded
        self.states = {name: EngineState() for name in engines}
        self._warming: dict[str, asyncio.Task[None]] = {}
        self.units = [self._unit(engine) for engine in engines.values()]
        self.manager = ModelManager(self.units, settings.idle_evict_seconds, coload=settings.coload)
        """The local manager, or the fleet's once `fleet.attach` has replaced it."""

    def _unit(self, engine: Engine) -> ManagedUnit:
        def loader() -> Engine:
            started = time.perf_counter()
            try:
                engine.load()
            except Exception as exc:
                self.states[engine.name] = EngineState("failed", str(exc))
                if isinstance(exc, EngineLoadError):
                    raise
                raise EngineLoadError(f"{engine.name} failed to load: {exc}") from exc
            # The footprint is measured once the weights are in memory; before the load it is unknown.
            unit.footprint = engine.footprint
            if self.states[engine.name].status != "warming":  # a warm-up declares itself ready when it is done
                self.states[engine.name] = EngineState("ready")
            self.on_loaded(engine.name, time.perf_counter() - started)
            return engine

        default = engine.name == self.settings.default_engine
        policy = ResidencyPolicy[self.settings.default_residency] if default else ResidencyPolicy.UNPINNED
        unit = ManagedUnit(engine.name, loader, lambda _: engine.unload(), 0, policy)
        return unit

    def status(self) -> tuple[str, str | None]:
        """The node's readiness: that of its default engine."""
        state = self.states[self.settings.default_engine]
        if state.status in ("warming", "failed"):
            return state.status, state.reason
        return "ready", None

    def warm(self, name: str) -> None:
        """Load an engine (and run its warm-up) on the GPU thread; the engine answers 503 `warming` meanwhile. An
        engine already loaded, or loading, is left as it is."""
        if name in self._warming or name in self.manager.resident():
            return
        self.states[name] = EngineState("warming")
        task = asyncio.get_running_loop().create_task(self._warm(name))
        self._warming[name] = task
        task.add_done_callback(lambda _: self._warming.pop(name, None))

    def ensure(self, name: str) -> Engine:
        """On the GPU thread: the engine, loaded. Its weights are checked first, so a resident engine is never evicted
        for one that cannot load; that one is marked failed instead, and the resident one keeps serving."""
        engine = self.engines[name]
        if name not in self.manager.resident():
            try:
                engine.preflight()
            except EngineLoadError as exc:
                self.states[name] = EngineState("failed", str(exc))
                raise
        self.manager.ensure(name)
        return engine

    async def load(self, name: str) -> None:
        """Load an engine now and wait for it (an operator's or broker's request); raises what the load raised."""
        self.warm(name)
        await asyncio.shield(self._warming[name]) if name in self._warming else None
        state = self.states[name]
        if state.status == "failed":
            raise EngineLoadError(f"engine {name!r} failed to load: {state.reason}")

    async def _warm(self, name: str) -> None:
        started = time.perf_counter()
        try:
            engine = await self.gpu.run(self.ensure, name)
            await self.gpu.run(engine.warmup)
        except Exception as exc:
            self.states[name] = EngineState("failed", str(exc))
            log.error("engine %s failed to load: %s", name, exc, exc_info=not isinstance(exc, ServiceError))
            return
        self.states[name] = EngineState("ready")
        log.info("engine %s ready in %.2fs", name, time.perf_counter() - started)

    def _not_served(self, name: str) -> str:
        return f"engine {name[:40]!r} is not served by this node (it serves: {', '.join(sorted(self.engines))})"

    def engine_for(self, name: str) -> Engine:
        """The engine of a family, ready to take work; 422 when this node does not run it (a voice of another
        family), 503 while it cannot."""
        engine = self.engines.get(name)
        if engine is None:
            raise InvalidInput(self._not_served(name), code="engine_unavailable")
        state = self.states[name]
        retry = self.settings.retry_after_seconds
        if state.status == "warming":
            raise Unavailable(f"engine {name!r} is loading; retry shortly", code="warming", retry_after=retry)
        if state.status == "failed":
            if time.monotonic() - state.since >= retry:
                self.warm(name)
                raise Unavailable(f"engine {name!r} is loading again; retry shortly", code="warming", retry_after=retry)
            raise Unavailable(
                f"engine {name!r} failed to load: {state.reason}", code="engine_failed", retry_after=retry
            )
        return engine

    def unready(self) -> list[str]:
        """Engines that cannot list what they serve yet (loading or failed)."""
        return [name for name, state in self.states.items() if state.status in ("warming", "failed")]

    def get(self, name: str) -> Engine:
        """An engine this node runs, by family name; 404 otherwise (for the admin routes)."""
        engine = self.engines.get(name)
        if engine is None:
            raise NotFound(self._not_served(name), code="engine_not_found")
        return engine

    def report(self, name: str, queue: dict[str, Any]) -> dict[str, Any]:
        """One engine as the admin routes show it: readiness, weights, measured footprint, residency, queue."""
        described = self.get(name).describe()
        unit = self.manager.status()["units"][name]
        return {
            "state": self.states[name].status,
            "reason": self.states[name].reason,
            "backend": described.get("backend"),
            "device": described.get("device"),
            "checkpoint": described.get("checkpoint"),
            "resident": unit["resident"],
            "footprint_bytes": unit["footprint"],
            "policy": ResidencyPolicy(unit["policy"]).name,
            "loads": unit["loads"],
            "evictions": unit["evictions"],
            "last_load_s": unit["last_load_s"],
            "queue": queue,
        }

    def set_policy(self, name: str, policy: str) -> None:
        self.get(name)
        self.manager.set_policy(name, ResidencyPolicy[policy])

    def describe(self) -> dict[str, Any]:
        return {
            name: {**engine.describe(), "state": self.states[name].status, "reason": self.states[name].reason}
            for name, engine in self.engines.items()
        }
