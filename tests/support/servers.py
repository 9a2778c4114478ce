"""Real server processes for end-to-end tests: `python server.py` on a free port, configured by environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Protocol

import httpx

from bench.common import PROBE
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]


def service_env(tmp: Path, **env: str) -> dict[str, str]:
    """The POLYTTS_* variables of a test's service: its voices, lexicons and cache under `tmp`, the assembled Kokoro ONNX
    model, and `env` over them."""
    return {
        "POLYTTS_VOICES_DIR": str(tmp / "voices"),
        "POLYTTS_CACHE_DIR": str(tmp / "cache"),
        "POLYTTS_JOBS_DIR": str(tmp / "jobs"),
        "POLYTTS_LEXICONS_DIR": str(tmp / "lexicons"),
        "POLYTTS_KOKORO_ONNX_DIR": str(ROOT / "models" / "kokoro-82m-int8"),
        # One intra-op thread: the same audio for about a fifth less CPU than every core, whose threads spin
        # between operators, and no core taken from the other test worker (ONNX Runtime does not read OMP_NUM_THREADS).
        "POLYTTS_ONNX_THREADS": "1",
        # The int8 route wherever the test runs (`auto` takes OpenVINO's bf16 on some processors): the audio every
        # test expects, and measured, less CPU than bf16 at one thread per test server; the route tests ask for theirs.
        "POLYTTS_KOKORO_ONNX_ROUTE": "int8",
        # No Qwen3-TTS on PyTorch unless a test asks for it: tests use `qwen` as a family a node may lack.
        "POLYTTS_QWEN_MODEL": "",
        # No dots.tts either unless a test asks (tests/e2e/test_server_dots.py does).
        "POLYTTS_DOTS_MODEL": "",
        # Nor CosyVoice (tests/e2e/test_server_cosyvoice.py asks for it).
        "POLYTTS_COSYVOICE_MODEL": "",
        **env,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """`python server.py` as its own process, configured through POLYTTS_* variables, spoken to over HTTP."""

    def __init__(self, tmp: Path, **env: str) -> None:
        self.port = free_port()
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.log_path = tmp / f"server-{self.port}.log"
        self.env = {
            **os.environ,
            "POLYTTS_PORT": str(self.port),
            "POLYTTS_HOST": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
            **service_env(tmp, **env),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, wait_ready: bool = True, timeout: float = 60.0) -> ServerProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "server.py"], cwd=ROOT, env=self.env, stdout=log, stderr=log)
        try:
            wait_until(
                self._answers if wait_ready else self._listens, timeout, "the server to be ready", detail=self.log
            )
        except BaseException:  # not left running (and taking a core) after its test has failed
            self.stop()
            raise
        return self

    def _status(self) -> str | None:
        """/health's status, or None while nothing listens; raises once the process has exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return str(PROBE.get(self.url + "/health", timeout=2).json()["status"])
        except httpx.TransportError:
            return None

    def _listens(self) -> bool:
        return self._status() is not None

    def _answers(self) -> bool:
        return self._status() not in (None, "warming")

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Logged(Protocol):
    """A service whose log a test reads: a server process, or an app in the test's process."""

    def log(self) -> str: ...


def no_tracebacks(service: Logged) -> None:
    """No error was logged with a stack: clients' mistakes get an answer and a line, not a traceback."""
    assert "Traceback" not in service.log(), service.log()[-4000:]


def outcomes(service: Logged, route: str) -> int:
    """How many requests of `route` have ended so far (a leading "/" tells `/stream-input` from `multi-...`)."""
    return service.log().count(f"{route} outcome=")


def outcome_line(service: Logged, route: str, before: int, timeout: float = 120.0) -> str:
    """The log line of the next request of `route` after the `before` already ended, once it has ended."""

    def ended() -> str | None:
        lines = [line for line in service.log().splitlines() if f"{route} outcome=" in line]
        return lines[before] if len(lines) > before else None

    return wait_until(ended, timeout, f"the {route} request to end", detail=service.log)


def spoken_chars(line: str) -> int:
    """The characters a request's log line says were spoken (a live request's: as far as its phrases went)."""
    return int(line.split(" chars=")[1].split()[0])
