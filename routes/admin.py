"""The control plane an operator or a fleet broker drives: engines (load, unload, residency), memory, the fair queue.

With API keys configured, every route here needs an admin key (POLYTTS_ADMIN_KEYS); an ordinary key gets 403.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel

from dependencies import AdminOnly, ServiceDep
from errors import InvalidInput
from protocol import UnloadResult

router = APIRouter(tags=["admin"], dependencies=[AdminOnly])


class PolicyChange(BaseModel):
    policy: Literal["HARD_PIN", "SOFT_PIN", "UNPINNED"]


@router.get("/admin/engines")
async def engines(service: ServiceDep) -> dict[str, Any]:
    """Per engine: state, backend, checkpoint, measured footprint, residency policy, loads, evictions, queue."""
    return {"engines": {name: service.engine_report(name) for name in service.pool.engines}}


@router.post("/admin/engines/{name}/load")
async def load_engine(name: str, service: ServiceDep) -> dict[str, Any]:
    """Load an engine now (evicting others unless POLYTTS_COLOAD) and answer once it is ready."""
    service.pool.get(name)
    await service.pool.load(name)
    return service.engine_report(name)


@router.post("/admin/engines/{name}/unload", response_model=UnloadResult)
async def unload_engine(name: str, service: ServiceDep) -> UnloadResult:
    service.pool.get(name)
    return UnloadResult(unloaded=await service.gpu.run(service.pool.manager.unload_now, name))


@router.put("/admin/engines/{name}/policy")
async def set_policy(name: str, change: PolicyChange, service: ServiceDep) -> dict[str, Any]:
    service.pool.set_policy(name, change.policy)
    return service.engine_report(name)


@router.get("/admin/memory")
async def memory(service: ServiceDep) -> dict[str, Any]:
    return service.memory()


@router.get("/admin/scheduler")
async def scheduler_state(service: ServiceDep) -> dict[str, Any]:
    """The fair queue in detail: per engine and per key running, waiting, weight, used GPU time, rejections."""
    return service.scheduler_state()


@router.post("/model/unload", response_model=UnloadResult)
async def unload(service: ServiceDep, engine: str | None = None) -> UnloadResult:
    """Unload one engine (`?engine=`) or every resident one; the next request loads again."""
    if engine is not None and engine not in service.pool.engines:
        raise InvalidInput(f"engine {engine[:40]!r} is not served by this node", code="engine_unavailable")
    return UnloadResult(unloaded=await service.gpu.run(service.pool.manager.unload_now, engine))
