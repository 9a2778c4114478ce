"""The FastAPI app: an app factory that mounts every front and the node's own routers, a lifespan that binds first
and warms after, and `serve`, which binds the port and serves the app until a stop request has drained it
(web/serving.py). `server.py` calls `serve` once the settings are known to be valid."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import sys
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI

from engines.device import RuntimeRefused, check_runtime
from lifecycle.service import build_service
from settings import Settings, load_settings
from web import api_docs, fleet, redaction
from web.auth import ApiKeys, Authenticate, is_public
from web.connections import ConnectionCloser
from web.fronts import FRONTS
from web.http_errors import install_error_handlers
from web.middleware import AccessLog, BodyLimit, CutStreams
from web.request_ids import RequestIds
from web.routes import admin, docs, lexicons, operations, playground, voices
from web.serving import RESPONSES_GRACE_S, DrainingServer

log = logging.getLogger("polytts.server")
PUBLIC_PATHS = ("/", "/health", "/ready", "/metrics", "/docs", "/redoc", "/openapi.json", "/ui")
"""Answered without an API key: what balancers, brokers and scrapers poll, the API docs and the playground (whose
page asks for a key when the API answers 401)."""
OWN_BODY_LIMITS = ("/voices", "/voices/bundle", "/lexicons")
"""Routes that bound their bodies themselves, part by part as they arrive (beside the fronts' own)."""
MAX_JSON_BODY_BYTES = 1024 * 1024


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = app.state.service = build_service(settings)
        # Bind first, warm after: the port is open while the default engine loads. In a fleet, the broker warms it.
        in_fleet = fleet.attach(app, service)
        service.start(warm=settings.warm_on_start and not in_fleet)
        await service.jobs.start()  # jobs a stop or a crash interrupted go on from their last finished piece
        evictor = asyncio.create_task(service.evict_idle())
        log.info(
            "serving %d voices from %s; engines: %s",
            len(service.registry),
            settings.voices_dir,
            ", ".join(service.pool.engines),
        )
        try:
            yield
        finally:
            evictor.cancel()
            await service.jobs.stop()
            service.stop()

    app = FastAPI(title="PolyTTS", lifespan=lifespan, docs_url=None, redoc_url=None)  # routes/docs.py: offline
    retry = settings.retry_after_seconds
    install_error_handlers(app, retry, FRONTS)
    own_limits = (*OWN_BODY_LIMITS, *(path for front in FRONTS for path in front.own_body_limits))
    app.add_middleware(BodyLimit, limit=MAX_JSON_BODY_BYTES, own_limits=own_limits, retry_after=retry, fronts=FRONTS)
    keys = ApiKeys(settings.api_keys, settings.admin_keys, FRONTS)
    app.add_middleware(Authenticate, keys=keys, public=PUBLIC_PATHS, retry_after=retry, fronts=FRONTS)
    # Speech routes log one line of their own per request, with its audio timings.
    app.add_middleware(AccessLog, own_log=tuple(path for front in FRONTS for path in front.speech_paths))
    app.add_middleware(CutStreams)
    redaction.install(FRONTS)
    app.add_middleware(RequestIds)  # outermost: every answer and every log line has the id
    front_routers = [router for front in FRONTS for router in front.routers]
    for router in (voices.router, *front_routers, operations.router, admin.router, playground.router, docs.router):
        app.include_router(router)
    app.include_router(lexicons.router)
    api_docs.install(
        app,
        public=lambda path: is_public(path, PUBLIC_PATHS),
        max_text_chars=settings.max_text_chars,
        fronts=FRONTS,
    )
    return app


def _bind(host: str, port: int, send_buffer: int = 0) -> socket.socket:
    """Bind the listening socket ourselves: uvicorn exits 0 on a port in use, which a supervisor reads as a stop."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and without it the last small
    # write of a response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer:  # inherited by every accepted connection: bounds what a slow reader's connection absorbs
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:  # exit 1: the other process may be gone by the next start
            raise SystemExit(
                f"polytts: port {port} on {host} is already in use; stop the other server or set POLYTTS_PORT"
            ) from None
        # Anything else is the configuration's: exit 2, as for any invalid setting.
        if exc.errno == errno.EACCES:
            problem = f"POLYTTS_PORT: cannot bind {host}:{port}: {exc.strerror}; expected a port this user may bind"
        else:
            problem = f"POLYTTS_HOST: cannot bind {host}:{port}: {exc.strerror}; expected an address of this host"
        sys.stderr.write(f"polytts: invalid configuration: {problem}\n")
        raise SystemExit(2) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(settings: Settings) -> int:
    """Serve on the settings' host and port until stopped: 0 after a clean stop, 1 when the server never started,
    3 when the demanded runtime is missing (the port bound first, so a port in use is its own clear exit)."""
    try:
        check_runtime(settings.runtime, settings.allow_cpu)
    except RuntimeRefused as exc:
        log.error("%s", exc)
        return 3
    sock = _bind(settings.host, settings.port, settings.send_buffer_bytes)
    app = create_app(settings)
    config = uvicorn.Config(
        ConnectionCloser(app),
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=RESPONSES_GRACE_S + 2,  # a backstop: DrainingServer closes what lingers first
    )
    server = DrainingServer(config, app)
    log.info("binding http://%s:%d", settings.host, settings.port)
    server.run(sockets=[sock])
    return 0 if server.started else 1
