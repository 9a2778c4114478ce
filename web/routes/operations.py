"""What operators, balancers and brokers poll: `GET /health`, `GET /ready`, `GET /metrics`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from lifecycle.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from web import api_docs
from web.auth import Identity
from web.dependencies import ServiceDep, get_identity
from web.protocol import Health, PublicHealth, ReadyState

router = APIRouter(tags=["operations"])


def _keyless(service: ServiceDep, identity: Annotated[Identity | None, Depends(get_identity)]) -> bool:
    """Whether the caller gets the public view: keys are configured and it gave none (these routes are public)."""
    return service.keys_configured and identity is None


Keyless = Annotated[bool, Depends(_keyless)]


@router.get("/health", response_model=Health | PublicHealth)
async def health(service: ServiceDep, keyless: Keyless) -> JSONResponse:
    """Readiness, engines, residency, in-flight work, limits, voices and caches; without a key on a node with keys,
    only status, engines' states and load (and the inventory if POLYTTS_PUBLIC_INVENTORY)."""
    # Sent as built: the models document the body, and each engine's description carries fields of its own.
    return JSONResponse(jsonable_encoder(service.public_health() if keyless else service.health()))


_NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {"model": ReadyState, "description": "Not taking work now.", "headers": api_docs.RETRY_AFTER}
}


@router.get("/ready", response_model=ReadyState, responses=_NOT_READY)
async def ready(service: ServiceDep, keyless: Keyless) -> JSONResponse:
    """200 when the node takes work; 503 with Retry-After while it warms, has failed, or drains."""
    status, reason = service.status()
    if status == "ready":
        return JSONResponse({"status": status})
    retry = {"Retry-After": str(max(1, round(service.settings.retry_after_seconds)))}
    body = {"status": status} if keyless else {"status": status, "reason": reason}
    return JSONResponse(body, status_code=503, headers=retry)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(service: ServiceDep, keyless: Keyless) -> Response:
    """Prometheus metrics; the per-key series (which name the keys) only for a caller with a key."""
    return Response(service.metrics.render(per_key=not keyless), media_type=METRICS_CONTENT_TYPE)
