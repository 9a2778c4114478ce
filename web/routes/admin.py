"""The control plane an operator or a fleet broker drives: engines (load, unload, residency), memory, the fair queue.

With API keys configured, every route here needs an admin key (POLYTTS_ADMIN_KEYS); an ordinary key gets 403.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel

from engines import FAMILIES
from errors import InvalidInput
from web import api_docs
from web.dependencies import AdminOnly, ServiceDep
from web.protocol import UnloadResult

router = APIRouter(tags=["admin"], dependencies=[AdminOnly], responses=api_docs.errors(403))

_FAMILIES = {"enum": list(FAMILIES)}  # documented, not validated here: one this node does not serve is its 404 or 422
EngineName = Annotated[str, Path(description="An engine this node serves.", json_schema_extra=_FAMILIES)]


class PolicyChange(BaseModel):
    policy: Literal["HARD_PIN", "SOFT_PIN", "UNPINNED"]


@router.get("/admin/engines")
async def engines(service: ServiceDep) -> dict[str, Any]:
    """Per engine: state, backend, checkpoint, measured footprint, residency policy, loads, evictions, queue."""
    return {"engines": {name: service.engine_report(name) for name in service.pool.engines}}


@router.post("/admin/engines/{name}/load", responses=api_docs.errors(404, 503))
async def load_engine(name: EngineName, service: ServiceDep) -> dict[str, Any]:
    """Load an engine now (evicting others unless POLYTTS_COLOAD) and answer once it is ready."""
    service.pool.get(name)
    await service.pool.load(name)
    return service.engine_report(name)


@router.post("/admin/engines/{name}/unload", response_model=UnloadResult, responses=api_docs.errors(404))
async def unload_engine(name: EngineName, service: ServiceDep) -> UnloadResult:
    service.pool.get(name)
    return UnloadResult(unloaded=await service.gpu.run(service.pool.manager.unload_now, name))


@router.put("/admin/engines/{name}/policy", responses=api_docs.errors(404, 422))
async def set_policy(name: EngineName, change: PolicyChange, service: ServiceDep) -> dict[str, Any]:
    service.pool.set_policy(name, change.policy)
    return service.engine_report(name)


@router.get("/admin/memory")
async def memory(service: ServiceDep) -> dict[str, Any]:
    return service.memory()


@router.get("/admin/scheduler")
async def scheduler_state(service: ServiceDep) -> dict[str, Any]:
    """The fair queue in detail: per engine and per key running, waiting, weight, used GPU time, rejections."""
    return service.scheduler_state()


@router.post("/model/unload", response_model=UnloadResult, responses=api_docs.errors(422))
async def unload(
    service: ServiceDep,
    engine: Annotated[
        str | None, Query(description="The engine; every resident one when left out.", json_schema_extra=_FAMILIES)
    ] = None,
) -> UnloadResult:
    """Unload one engine (`?engine=`) or every resident one; the next request loads again."""
    if engine is not None and engine not in service.pool.engines:
        raise InvalidInput(f"engine {engine[:40]!r} is not served by this node", code="engine_unavailable")
    return UnloadResult(unloaded=await service.gpu.run(service.pool.manager.unload_now, engine))
