"""The service in the test's own process: `create_app` on the settings a `ServerProcess` would read, spoken to
through Starlette's TestClient (an ASGI client that runs the app's lifespan), for HTTP behaviour that needs no real
process. Its `polytts` log lines are kept in the server's own format."""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from fastapi.testclient import TestClient

from lifecycle.service import Service, build_service
from server import LOG_FORMAT
from settings import load_settings
from tests.support.polling import wait_until
from tests.support.servers import service_env
from web.app import create_app

READY_S = 60.0
"""How long the default engine may take to load."""


@contextlib.contextmanager
def kokoro_service(tmp: Path, onnx_dir: Path, **settings: Any) -> Iterator[Service]:
    """The service without its app, on the real Kokoro ONNX engine from `onnx_dir` (one thread, as a test server's),
    its GPU thread running; the engine loads on first use. `settings`: Settings fields."""
    built = build_service(
        load_settings(
            voices_dir=tmp / "voices",
            cache_dir=tmp / "cache",
            lexicons_dir=tmp / "lexicons",
            kokoro_onnx_dir=onnx_dir,
            kokoro_backend="onnx",
            **{"onnx_threads": 1, "kokoro_onnx_route": "int8", **settings},
        )
    )
    built.gpu.start()
    built.pool.states["kokoro"].status = "ready"
    try:
        yield built
    finally:
        built.gpu.stop()


class InProcessApp:
    """One app with its service, configured through the same POLYTTS_* variables as a server process; `client` is
    the open TestClient while it runs, and answers a failure as a server would (a 500, not a raised error)."""

    def __init__(self, tmp: Path, **env: str) -> None:
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        with mock.patch.dict(os.environ, service_env(tmp, **env)):
            self.settings = load_settings()
        self._log = io.StringIO()
        self._handler = logging.StreamHandler(self._log)
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self._logger = logging.getLogger("polytts")
        self._level = logging.NOTSET  # the logger's own, restored at the stop
        self._client: TestClient | None = None

    @property
    def client(self) -> TestClient:
        assert self._client is not None, "the app is not running"
        return self._client

    def start(self) -> InProcessApp:
        """Run the lifespan (the service starts and warms its default engine) and wait until it is not warming."""
        self._level = self._logger.level
        self._logger.addHandler(self._handler)
        self._logger.setLevel(self.settings.log_level.upper())  # what the server's logging config sets
        self._client = TestClient(create_app(self.settings), raise_server_exceptions=False)
        self._client.__enter__()
        try:
            wait_until(lambda: self.client.get("/health").json()["status"] != "warming", READY_S, "the app to be ready")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            if self._client is not None:
                self._client.__exit__(None, None, None)
                self._client = None
        finally:
            self._logger.removeHandler(self._handler)
            self._logger.setLevel(self._level)

    def log(self) -> str:
        return self._log.getvalue()

    def __enter__(self) -> InProcessApp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
