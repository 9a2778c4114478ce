"""Joining a livestack fleet: when the installed `livestack_node` provides `attach`, the fleet drives this node.

`attach` gets the app (it mounts the broker's routes), this node's identity and managed units, and callables the
broker uses: `gpu_call(fn)` runs `fn` on the one GPU thread and returns its result (it blocks its caller: call it from
a thread of the fleet's, never from the event loop), `in_flight()` counts syntheses under way, `inventory()` lists the
voices this node can serve (computed per call), and `preload()` warms the default engine. It returns the model
manager the fleet coordinates, which then replaces the local one. Without `attach`, the local manager serves, and
the node warms its default engine itself after the bind.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import FastAPI

from gpu import residency
from lifecycle.service import Service

log = logging.getLogger("polytts.fleet")


def attach(app: FastAPI, service: Service) -> bool:
    """Attach to the fleet if `livestack_node.attach` exists (call from the lifespan, after the bind, before the GPU
    thread starts); returns whether it did."""
    if residency.attach is None:
        return False
    settings, pool = service.settings, service.pool
    loop = asyncio.get_running_loop()

    def preload() -> None:  # the broker may call it from any thread
        loop.call_soon_threadsafe(pool.warm, settings.default_engine)

    manager: Any = residency.attach(
        app,
        host_id=settings.host_id,
        kind="polytts",
        units=pool.units,
        idle_seconds=settings.idle_evict_seconds,
        coload=settings.coload,
        gpu_call=service.gpu.call,
        port=settings.port,
        in_flight=lambda: service.synthesis.in_flight,
        inventory=service.inventory,
        preload=preload,
    )
    if manager is not None:
        pool.manager = manager
    service.attached = True
    log.info("attached to the livestack fleet as %s (%d units)", settings.host_id, len(pool.units))
    return True
