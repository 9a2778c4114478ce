"""Refused WebSocket handshakes on a real server (uvicorn, spoken to by the `websockets` library): each is one line of
the service's own, with the route, the client's address and the code, and uvicorn logs no ERROR about it."""

from __future__ import annotations

import base64
import json
import signal
from pathlib import Path

import pytest
import websockets
from websockets.sync.client import connect

from bench.common import PROBE
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess

KEY = "handshake-secret"


def handshake_status(url: str, subprotocols: list[str]) -> int:
    with pytest.raises(websockets.InvalidStatus) as denied:
        connect(url, subprotocols=subprotocols, open_timeout=10)  # type: ignore[arg-type]
    return denied.value.response.status_code


def test_refused_handshakes_log_one_line_of_ours_and_no_uvicorn_error(tmp_path: Path, assembled_model: Path) -> None:
    # A long drain: the session held open below keeps the node draining until the test ends it.
    server = ServerProcess(
        tmp_path,
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_API_KEYS=json.dumps({KEY: "client"}),
        POLYTTS_DRAIN_SECONDS="600",
    ).start()
    url = server.url.replace("http", "ws") + "/tts/live/ws?voice=af_heart"
    key = "bearer." + base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    try:
        assert handshake_status(url, ["polytts"]) == 401  # no key
        assert handshake_status(url, ["polytts", "bearer.d3Jvbmc"]) == 401  # a wrong key
        with connect(url, subprotocols=["polytts", key], open_timeout=10) as held:  # type: ignore[list-item]
            held.send(json.dumps({"text": "Spoken while the node drains."}))
            assert json.loads(held.recv(timeout=60))["type"] == "start"
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: PROBE.get(server.url + "/ready").status_code == 503, 10, "the node to drain")
            assert handshake_status(url, ["polytts", key]) == 503  # refused by the route itself
            held.send(json.dumps({"end": True}))
            assert json.loads([message for message in held if isinstance(message, str)][-1])["type"] == "done"
        assert server.proc.wait(30) == 0
        log = server.log()
        assert log.count("tts/live/ws outcome=unauthorized status=401 client=127.0.0.1") == 2, log
        assert log.count("tts/live/ws outcome=draining status=503 client=127.0.0.1") == 1, log
        assert "without completing handshake" not in log and " ERROR " not in log, log
    finally:
        server.stop()
