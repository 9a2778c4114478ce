"""Real server processes for end-to-end tests: `python server.py` on a free port, configured by environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


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
            "POLYTTS_VOICES_DIR": str(tmp / "voices"),
            "POLYTTS_CACHE_DIR": str(tmp / "cache"),
            "POLYTTS_KOKORO_ONNX_DIR": str(ROOT / "models" / "kokoro-82m-int8"),
            # No Qwen3-TTS on PyTorch unless a test asks for it: tests use `qwen` as a family a node may lack.
            "POLYTTS_QWEN_MODEL": "",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, wait_ready: bool = True, timeout: float = 60.0) -> ServerProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "server.py"], cwd=ROOT, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status = httpx.get(self.url + "/health", timeout=2).json()["status"]
                if not wait_ready or status != "warming":
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"server not ready in {timeout}s:\n{self.log()}")

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
