"""The FastAPI app: an app factory that mounts the routers, a lifespan that binds first and warms after, and `main`.

Run it with `./run.sh` (or `python server.py`): it binds the port itself, so a port already in use is a non-zero exit
with a message that says so, not uvicorn's silent exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from types import FrameType

import uvicorn
from fastapi import FastAPI

from engines.device import RuntimeRefused, check_runtime
from errors import Unavailable
from lifecycle.service import Service, build_service
from settings import Settings, load_settings, settings_or_report
from web import api_docs, cartesia_protocol, fleet, redaction
from web.auth import ApiKeys, Authenticate, is_public
from web.connections import ConnectionCloser
from web.elevenlabs_protocol import SpeechBody
from web.http_errors import install_error_handlers
from web.middleware import AccessLog, BodyLimit, CutStreams
from web.openai_protocol import SpeechRequest
from web.protocol import TTSRequest
from web.request_ids import RequestIds
from web.routes import admin, cartesia, docs, elevenlabs, openai, operations, playground, speech, voices

log = logging.getLogger("polytts.server")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PUBLIC_PATHS = ("/", "/health", "/ready", "/metrics", "/docs", "/redoc", "/openapi.json", "/ui")
"""Answered without an API key: what balancers, brokers and scrapers poll, the API docs and the playground (whose
page asks for a key when the API answers 401)."""
SPEECH_PATHS = ("/tts", "/v1/audio/speech", "/elevenlabs/v1/text-to-speech", "/cartesia/tts")
"""Routes that log one line of their own per request, with its audio timings."""
OWN_BODY_LIMITS = ("/voices", "/voices/bundle", "/tts/live")
"""Routes that bound their bodies themselves, part by part as they arrive."""
MAX_JSON_BODY_BYTES = 1024 * 1024


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = app.state.service = build_service(settings)
        # Bind first, warm after: the port is open while the default engine loads. In a fleet, the broker warms it.
        in_fleet = fleet.attach(app, service)
        service.start(warm=settings.warm_on_start and not in_fleet)
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
            service.stop()

    app = FastAPI(title="PolyTTS", lifespan=lifespan, docs_url=None, redoc_url=None)  # routes/docs.py: offline
    install_error_handlers(app, settings.retry_after_seconds)
    retry = settings.retry_after_seconds
    app.add_middleware(BodyLimit, limit=MAX_JSON_BODY_BYTES, own_limits=OWN_BODY_LIMITS, retry_after=retry)
    keys = ApiKeys(settings.api_keys, settings.admin_keys)
    app.add_middleware(Authenticate, keys=keys, public=PUBLIC_PATHS, retry_after=retry)
    app.add_middleware(AccessLog, own_log=SPEECH_PATHS)
    app.add_middleware(CutStreams)
    redaction.install()
    app.add_middleware(RequestIds)  # outermost: every answer and every log line has the id
    for area in (voices, speech, openai, elevenlabs, cartesia, operations, admin, playground, docs):
        app.include_router(area.router)
    api_docs.install(
        app,
        public=lambda path: is_public(path, PUBLIC_PATHS),
        max_text_chars=settings.max_text_chars,
        text_fields={
            TTSRequest.__name__: "text",
            SpeechRequest.__name__: "input",
            SpeechBody.__name__: "text",
            cartesia_protocol.GenerationRequest.__name__: "transcript",
        },
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


SIGNALS_TOGETHER_S = 2.0
"""Stop signals this close after the first are that same stop request; a later one is a second request. One Ctrl+C
is a SIGINT to the whole process group and a SIGTERM from run.sh milliseconds later, and supervisors and container
runtimes signal every process of a group at once; a person asking again to stop now has seen the drain begin."""
RESPONSES_GRACE_S = 3
"""Once the drain is over, responses still being sent get this long before their connections are closed."""


class _Server(uvicorn.Server):
    """Drains on a stop request (SIGTERM or SIGINT), stops at once on a second, and exits 0 after a clean stop.

    Draining: /ready answers 503 at once (a balancer stops sending work), new syntheses get 503 `draining`, the ones
    under way finish; after POLYTTS_DRAIN_SECONDS whatever still runs is cut and logged. Only then does uvicorn stop
    listening and shut down. Signals within SIGNALS_TOGETHER_S of the first are one request; a later one cuts what
    runs and closes every connection at once.

    A cut request's connection is closed: uvicorn would cancel a request still running at the end of its graceful
    shutdown, which logs a CancelledError traceback and answers 500 text/plain where no response had started. So
    connections still open after RESPONSES_GRACE_S (at once on a second request) are aborted first, and each
    request ends by finding its client gone; uvicorn's own timeout is only a backstop. uvicorn would also re-raise
    the signal after its shutdown, so the process would die by it; a supervisor must see a clean stop as exit 0.
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app
        self.stop_signals: list[tuple[int, float]] = []
        """Each stop signal and when it came (time.monotonic), in order."""
        self.signals_logged = 0
        self.drain_announced = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Noted only: this runs as a signal handler; the event loop acts on it (on_tick, then shutdown).
        self.stop_signals.append((sig, time.monotonic()))

    @property
    def stop_now(self) -> bool:
        """A second stop request came: a signal more than SIGNALS_TOGETHER_S after the first."""
        return bool(self.stop_signals) and self.stop_signals[-1][1] - self.stop_signals[0][1] >= SIGNALS_TOGETHER_S

    def _log_signals(self) -> None:
        """One line per stop signal, saying what it counts as (signal handlers must not log)."""
        for sig, at in self.stop_signals[self.signals_logged :]:
            name, after = signal.Signals(sig).name, at - self.stop_signals[0][1]
            if not self.signals_logged:
                log.info("%s: stop requested", name)
            elif after < SIGNALS_TOGETHER_S:
                log.info("%s %.2f s after the first stop signal: the same stop request", name, after)
            else:
                log.warning("%s: a second stop request, %.1f s after the first: stopping at once", name, after)
            self.signals_logged += 1

    async def on_tick(self, counter: int) -> bool:
        self._log_signals()
        if self.stop_signals and not self.should_exit:
            self.should_exit = self._drained(counter)
        return await super().on_tick(counter)

    def _drained(self, counter: int) -> bool:
        """One tick of the drain: whether it is over (nothing runs, or what ran was cut)."""
        service: Service = self.app.state.service
        service.synthesis.draining = True
        left = service.synthesis.in_flight
        if not self.drain_announced or counter % 50 == 0:
            log.info("draining: /ready answers 503 and new syntheses are refused; %d still running", left)
            self.drain_announced = True
        if not left:
            return True
        if self.stop_now:
            why = "a second stop request"
        elif time.monotonic() >= self.stop_signals[0][1] + service.settings.drain_seconds:
            why = "drain time is up (POLYTTS_DRAIN_SECONDS)"
        else:
            return False
        log.warning("%s: cutting %d synthesis(es)", why, left)
        gone = Unavailable("the node shut down before this synthesis was done", code="shutting_down")
        service.scheduler.cancel_all("the node is shutting down", gone)
        return True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        closer = asyncio.create_task(self._close_lingering())
        try:
            await super().shutdown(sockets)
        finally:
            closer.cancel()

    async def _close_lingering(self) -> None:
        """Abort the connections still open RESPONSES_GRACE_S into the shutdown, or at once on a second stop
        request: the client sees its connection closed, and the request ends as for a client that went away."""
        deadline = time.monotonic() + RESPONSES_GRACE_S
        while not self.stop_now and time.monotonic() < deadline:
            self._log_signals()
            await asyncio.sleep(0.1)
        self._log_signals()
        if lingering := list(self.server_state.connections):
            log.warning("closing %d connection(s) still open", len(lingering))
        for connection in lingering:
            connection.transport.abort()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


def main() -> int:
    # Model libraries draw tqdm progress bars on stderr (VoxCPM, for every generation): noise in a server's log.
    # tqdm reads this when it is first imported, which happens later, when an engine loads.
    os.environ.setdefault("TQDM_DISABLE", "1")
    settings = settings_or_report()
    if settings is None:
        return 2
    # One format for the service's lines and uvicorn's: uvicorn gets no logging config of its own.
    logging.basicConfig(level=settings.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
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
        timeout_graceful_shutdown=RESPONSES_GRACE_S + 2,  # a backstop: _Server closes what lingers first
    )
    server = _Server(config, app)
    log.info("binding http://%s:%d", settings.host, settings.port)
    server.run(sockets=[sock])
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
