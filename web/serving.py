"""The uvicorn server the process runs its app on: it drains on a stop request (SIGTERM or SIGINT), stops at once on
a second, and exits 0 after a clean stop (`DrainingServer`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Iterator
from types import FrameType

import uvicorn
from fastapi import FastAPI

from errors import Unavailable
from lifecycle.service import Service

log = logging.getLogger("polytts.server")

SIGNALS_TOGETHER_S = 2.0
"""Stop signals this close after the first are that same stop request; a later one is a second request. One Ctrl+C
is a SIGINT to the whole process group and a SIGTERM from run.sh milliseconds later, and supervisors and container
runtimes signal every process of a group at once; a person asking again to stop now has seen the drain begin."""
RESPONSES_GRACE_S = 3
"""Once the drain is over, responses still being sent get this long before their connections are closed."""


class DrainingServer(uvicorn.Server):
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
