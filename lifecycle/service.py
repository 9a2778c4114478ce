"""The service as the routes see it: everything built once per process from the settings, and what it reports."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

from cache import MemoryCache
from engines import ENGINE_SPECS, FAMILIES
from engines.device import process_memory, uses_mlx
from gpu import residency
from gpu.engine_pool import EnginePool, build_engines
from gpu.gpu_thread import GpuThread
from gpu.jobs import ANONYMOUS
from gpu.scheduler import Scheduler
from jobs.runner import JobRunner
from lexicons.catalog import LexiconCatalog
from lexicons.dictionaries import DictionaryStore
from lexicons.store import LexiconStore
from lifecycle.catalog import VoiceCatalog
from lifecycle.metrics import Metrics
from lifecycle.synthesis import SynthesisService
from pcm_cache import PcmCache
from settings import Settings
from voicebank.peers import Peers
from voicebank.registry import VoiceRegistry
from voicebank.uploads import UploadBudget


@dataclass
class Service:
    settings: Settings
    registry: VoiceRegistry
    pool: EnginePool
    gpu: GpuThread
    scheduler: Scheduler
    catalog: VoiceCatalog
    synthesis: SynthesisService
    metrics: Metrics
    started_at: float
    uploads: UploadBudget
    """Bytes of voice uploads held in memory at once, across requests."""
    jobs: JobRunner
    """Background jobs (jobs/): started and stopped by the app's lifespan, around the GPU thread."""
    attached: bool = False
    """Whether a livestack fleet drives this node (`fleet.attach`)."""

    @property
    def dictionaries(self) -> DictionaryStore:
        """The pronunciation dictionaries (names over lexicon versions) of the vendor fronts that edit them."""
        return self.synthesis.planner.lexicons.dictionaries

    @property
    def lexicons(self) -> LexiconStore:
        """The lexicons stored on this node (the store the planner pronounces requests with)."""
        return self.synthesis.planner.lexicons.store

    @property
    def lexicon_catalog(self) -> LexiconCatalog:
        """Every lexicon and dictionary a request can name, this node's and its peers'."""
        return self.synthesis.planner.lexicons

    def start(self, warm: bool) -> None:
        """Start the GPU thread, and (bind first, warm after) load the default engine on it if `warm`."""
        self.gpu.start()
        if warm:
            self.pool.warm(self.settings.default_engine)

    def stop(self) -> None:
        self.gpu.stop()

    async def evict_idle(self) -> None:
        """Forever: unload engines idle for longer than POLYTTS_IDLE_EVICT_SECONDS (on the GPU thread)."""
        period = min(5.0, max(0.2, self.settings.idle_evict_seconds / 4))
        while True:
            await asyncio.sleep(period)
            await self.gpu.run(self.pool.manager.maybe_evict)

    def status(self) -> tuple[str, str | None]:
        """The node's readiness: draining, else that of its default engine (warming, failed or ready)."""
        if self.synthesis.draining:
            return "draining", "the node is shutting down; running syntheses finish, new ones go elsewhere"
        return self.pool.status()

    def health(self) -> dict[str, Any]:
        """What `GET /health` shows: readiness, engines, residency, in-flight work, limits, voices and caches."""
        settings, pool = self.settings, self.pool
        status, reason = self.status()
        default = pool.engines[settings.default_engine]
        synthesis = self.synthesis
        return {
            "status": status,
            "reason": reason,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started_at, 3),
            "device": default.describe()["device"],
            "default_engine": settings.default_engine,
            "runtime": "mlx" if uses_mlx(settings.runtime) else settings.runtime,
            "serves": sorted(pool.engines),
            "engines": pool.describe(),
            "resident": [
                {"engine": name, "checkpoint": pool.engines[name].checkpoint} for name in pool.manager.resident()
            ],
            "manager": pool.manager.status(),
            "fleet": {"attached": self.attached, "residency": residency.IMPLEMENTATION},
            "inflight": self.scheduler.stats(),
            "limits": {
                "max_inflight": settings.max_inflight,
                "max_queued_chars": settings.max_queued_chars,
                "max_text_chars": settings.max_text_chars,
                "max_upload_bytes": settings.max_upload_bytes,
            },
            "inventory": self.inventory(),
            "voices": {
                "registered": len(self.registry),
                "by_engine": self.registry.engines_in_use(),
                "ids": [v.voice_id for v in self.registry.list()],
                "builtin": sorted(self.catalog.builtins()),
            },
            # "wav" names the in-memory layer, as it did when it held WAV files.
            "caches": {"wav": synthesis.memory_cache.stats(), "pcm": synthesis.pcm_cache.stats()},
        }

    @property
    def keys_configured(self) -> bool:
        return bool(self.settings.api_keys or self.settings.admin_keys)

    def public_health(self) -> dict[str, Any]:
        """`/health` for a caller without a key on a node with keys: what a balancer or a broker needs, and no more
        (no paths, pid, key names or voice ids, unless POLYTTS_PUBLIC_INVENTORY publishes the inventory)."""
        status, _ = self.status()
        stats = self.scheduler.stats()
        view: dict[str, Any] = {
            "status": status,
            "engines": {name: {"state": state.status} for name, state in self.pool.states.items()},
            "load": {"running": stats["running"], "waiting": stats["waiting"], "in_flight": self.synthesis.in_flight},
        }
        if self.settings.public_inventory:
            view["inventory"] = self.inventory()
        return view

    def inventory(self) -> dict[str, list[str]]:
        """Voices this node can serve now: registered voices of engines it runs, and every built-in voice."""
        registered = [v.voice_id for v in self.registry.list() if v.engine in self.pool.engines]
        return {"voice": registered + sorted(self.catalog.builtins()), "job": self.jobs.job_ids()}

    def engine_descriptions(self) -> list[dict[str, Any]]:
        """What each engine this node runs takes: the JSON schema of its per-request parameters, whether it clones
        voices from clips, its sample rate, and its state."""
        return [
            {
                "name": name,
                "state": self.pool.states[name].status,
                "sample_rate": engine.sample_rate,
                "clone": FAMILIES[name].clones_from_clip,
                "packs": FAMILIES[name].accepts_packs,
                "live": True,
                "parameters": FAMILIES[name].params.model_json_schema(),
            }
            for name, engine in self.pool.engines.items()
        ]

    def engine_report(self, name: str) -> dict[str, Any]:
        queue = self.scheduler.stats()["engines"].get(name, {"running": 0, "waiting": 0, "rejected": 0})
        return self.pool.report(name, queue)

    def memory(self) -> dict[str, Any]:
        """Device memory per engine where its runtime reports it, and this process's resident memory."""
        engines = {name: engine.describe().get("memory", {}) for name, engine in self.pool.engines.items()}
        return {"engines": engines, "process": process_memory()}

    def scheduler_state(self) -> dict[str, Any]:
        """The fair queue in detail: its policy, and per engine and per key running, waiting, used time, rejections."""
        return {"policy": self.scheduler.policy(), **self.scheduler.stats()}


def build_service(settings: Settings) -> Service:
    gpu = GpuThread()
    # Read at scrape time, once the scheduler and the pool below exist.
    metrics = Metrics(lambda: scheduler.stats(), lambda: pool.manager.status(), lambda: jobs.stats())
    pool = EnginePool(settings, build_engines(settings, ENGINE_SPECS), gpu, metrics.engine_loaded)
    scheduler = Scheduler(
        gpu,
        settings,
        lambda: pool.manager.resident(),
        lanes=lambda engine: pool.engines[engine].steps_at_once,
        stops_cheaply=lambda engine: pool.engines[engine].stops_cheaply,
        shared_keys={ANONYMOUS},
    )
    registry = VoiceRegistry(
        settings.voices_dir,
        families=FAMILIES,
        max_upload_bytes=settings.max_upload_bytes,
        min_seconds=settings.voice_min_seconds,
        max_seconds=settings.voice_max_seconds,
    )
    peers = Peers(settings.peers, settings.peer_api_key, settings.peer_timeout_s, 4 * settings.max_upload_bytes)
    catalog = VoiceCatalog(registry, pool, settings.default_voice, peers, settings.max_upload_bytes)
    synthesis = SynthesisService(
        settings=settings,
        pool=pool,
        catalog=catalog,
        scheduler=scheduler,
        memory_cache=MemoryCache(settings.memory_cache_bytes),
        pcm_cache=PcmCache(settings.cache_dir / "pcm", settings.pcm_cache_bytes),
        metrics=metrics,
        lexicons=LexiconStore(settings.lexicons_dir),
    )
    jobs = JobRunner(settings, synthesis)
    return Service(
        settings,
        registry,
        pool,
        gpu,
        scheduler,
        catalog,
        synthesis,
        metrics,
        time.time(),
        UploadBudget(settings.upload_budget_bytes),
        jobs,
    )
