"""Process-level behaviour of `python server.py` and `./run.sh`: real processes, real ports, real signals.

`./run.sh` runs against this test run's own virtual environment (`POLYTTS_VENV=sys.prefix`), so it never
creates one; its first run in a fresh venv may still `pip install -r requirements.txt` (offline, from the local
index), hence the generous wait for the first /health. Every run.sh is started in its own session, and the
whole process group is killed in a `finally`, so no test leaves a process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_until
from tests.support.servers import ROOT, free_port

FIRST_HEALTH_S = 120.0  # a fresh venv makes run.sh's first run pip install (quick when all is satisfied)
STOP_S = 5.0  # "promptly": run.sh and the server stop within this after SIGTERM


def _env(tmp: Path, port: int, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("POLYTTS_")}
    env.update(
        {
            "POLYTTS_PORT": str(port),
            "POLYTTS_HOST": "127.0.0.1",
            "POLYTTS_VOICES_DIR": str(tmp / "voices"),
            "POLYTTS_CACHE_DIR": str(tmp / "cache"),
            "POLYTTS_KOKORO_ONNX_DIR": str(ROOT / "models" / "kokoro-82m-int8"),
            "POLYTTS_WARM_ON_START": "false",
            "POLYTTS_VENV": sys.prefix,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def _log(path: Path) -> Callable[[], str]:
    """The log at `path`, for a failure message."""
    return lambda: f"--- log ---\n{path.read_text(errors='replace')}" if path.exists() else ""


def _health(port: int) -> dict[str, Any] | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
    except httpx.TransportError:
        return None


def _state(pid: int) -> str | None:
    """The process's state letter from /proc, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for its parent."""
    return _state(pid) not in (None, "Z", "X")


def _group(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _default_sigint() -> None:
    """A shell started in the background (CI, `nohup`, `&`) begins with SIGINT ignored, and a non-interactive shell
    can neither trap nor reset a signal it started with ignored; run.sh gets SIGINT as a terminal would give it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class RunSh:
    """`./run.sh` in its own session; stderr goes to a file (never a pipe that can fill up)."""

    def __init__(self, tmp: Path, port: int, **env: str) -> None:
        self.port = port
        self.err_path = tmp / f"run-sh-{port}.err"
        self.out_path = tmp / f"run-sh-{port}.out"
        self.env = _env(tmp, port, **env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.server_pids: set[int] = set()

    def start(self) -> RunSh:
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                ["./run.sh"],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=_default_sigint,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def health(self, other_than: int | None = None, timeout: float = FIRST_HEALTH_S) -> dict[str, Any]:
        """Wait for /health answered by a server other than pid `other_than`; fail early if run.sh exits."""

        def probe() -> dict[str, Any] | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"run.sh exited with {self.proc.returncode}:\n{self.stderr()}")
            body = _health(self.port)
            return body if body is not None and body["pid"] != other_than else None

        body = wait_until(probe, timeout, f"/health on port {self.port}", detail=_log(self.err_path))
        self.server_pids.add(body["pid"])
        return body

    def wait_stderr(self, text: str, timeout: float = FIRST_HEALTH_S) -> float:
        """Wait until stderr contains `text`; returns the monotonic time it was first seen."""
        wait_until(lambda: text in self.stderr(), timeout, f"{text!r} in run.sh's stderr", detail=_log(self.err_path))
        return time.monotonic()

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"run.sh still running {timeout}s later:\n{self.stderr()}") from None

    def cleanup(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.server_pids:  # in run.sh's group anyway; belt and braces
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


@contextlib.contextmanager
def run_sh(tmp: Path, port: int, **env: str) -> Iterator[RunSh]:
    runner = RunSh(tmp, port, **env)
    try:
        yield runner.start()
    finally:
        runner.cleanup()


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A port kept busy by a listening socket on 127.0.0.1 for the duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def _server(tmp: Path, port: int, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
    err = tmp / f"server-{port}.err"
    with open(err, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "server.py"],
            cwd=ROOT,
            env=_env(tmp, port, **env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    return proc, err


def _run_server(tmp: Path, port: int, **env: str) -> tuple[int, str, float]:
    """Run `python server.py` until it exits (30 s at most): its exit status, its output, how long it ran."""
    proc, err = _server(tmp, port, **env)
    started = time.monotonic()
    try:
        code = proc.wait(30.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, err.read_text(errors="replace"), time.monotonic() - started


# --- python server.py -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("POLYTTS_PORT", "abc"),
        ("POLYTTS_PORT", "70000"),
        ("POLYTTS_IDLE_EVICT_SECONDS", "-1"),
        ("POLYTTS_LOG_LEVEL", "loud"),
    ],
)
def test_invalid_setting_exits_2_naming_the_variable(tmp_path: Path, name: str, value: str) -> None:
    code, stderr, _ = _run_server(tmp_path, free_port(), **{name: value})
    assert code == 2, stderr
    assert name in stderr
    assert "invalid configuration" in stderr
    assert "Traceback" not in stderr


def test_port_in_use_exits_nonzero_quickly_saying_so(tmp_path: Path) -> None:
    with held_port() as port:
        code, stderr, elapsed = _run_server(tmp_path, port)
    assert code != 0, stderr
    assert "already in use" in stderr
    assert str(port) in stderr
    assert "Traceback" not in stderr
    assert elapsed < 15, f"took {elapsed:.1f}s"


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warmed"])
def test_sigterm_after_health_exits_0(tmp_path: Path, warm: bool) -> None:
    port = free_port()
    proc, err = _server(tmp_path, port, POLYTTS_WARM_ON_START=str(warm).lower())
    try:

        def answered() -> dict[str, Any] | None:
            if proc.poll() is not None:
                raise AssertionError(f"server exited with {proc.returncode}:\n{err.read_text()}")
            body = _health(port)
            # warmed: wait until the default engine is loaded, so the stop also unloads a real model
            return body if body is not None and (not warm or body["status"] != "warming") else None

        body = wait_until(answered, 60, "/health", detail=_log(err))
        assert body["pid"] == proc.pid
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = proc.wait(20)
        assert code == 0, err.read_text()
        assert time.monotonic() - started < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- ./run.sh -------------------------------------------------------------------------------------------------


def test_run_sh_restarts_with_doubling_backoff_and_stops_on_sigterm_while_sleeping(tmp_path: Path) -> None:
    with held_port() as port, run_sh(tmp_path, port) as runner:
        first = runner.wait_stderr("restarting in 1s")
        second = runner.wait_stderr("restarting in 2s", timeout=30)
        # now sleeping in the 2 s backoff: SIGTERM must end run.sh (and its sleep) at once
        runner.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        sent = time.monotonic()
        assert runner.wait(STOP_S) == 0
        stopped_in = time.monotonic() - sent
        stderr = runner.stderr()
        assert f"port {port}" in stderr and "already in use" in stderr
        assert stderr.index("already in use") < stderr.index("restarting in 1s") < stderr.index("restarting in 2s")
        assert "server exited with status 1; restarting in 1s" in stderr
        assert second - first >= 0.9, "the second attempt came before the 1 s backoff was over"
        assert "restarting in 4s" not in stderr
        assert "run.sh: stopped" in stderr
        assert stopped_in < 2, f"run.sh took {stopped_in:.1f}s to stop"
        # the backoff `sleep 2` must go with run.sh, not linger on as an orphan until it runs out
        wait_until(lambda: not _group(runner.pid), 1.0, "run.sh's process group (backoff sleep) to be gone")


def test_run_sh_restarts_a_killed_server_and_stops_after_its_clean_exit(tmp_path: Path) -> None:
    port = free_port()
    with run_sh(tmp_path, port) as runner:
        first = runner.health()["pid"]
        assert first != runner.pid
        assert os.getpgid(first) == runner.pid  # the server is run.sh's child, in its group

        os.kill(first, signal.SIGKILL)
        second = runner.health(other_than=first, timeout=60)["pid"]
        assert second != first and _alive(second)
        assert "server exited with status 137; restarting in 1s" in runner.stderr()

        os.kill(second, signal.SIGTERM)  # the server only: a clean stop, so run.sh stops by itself
        assert runner.wait(20) == 0, runner.stderr()
        assert "run.sh: server exited cleanly" in runner.stderr()
        assert "restarting" not in runner.stderr().split("status 137; restarting in 1s", 1)[1]
        wait_until(lambda: not _alive(second), STOP_S, "the server to be gone")
        assert _health(port) is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_run_sh_stops_server_and_run_sh(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    with run_sh(tmp_path, port) as runner:
        server = runner.health()["pid"]
        runner.proc.send_signal(sig)  # type: ignore[union-attr]
        assert runner.wait(20) == 0, runner.stderr()
        wait_until(lambda: not _alive(server), STOP_S, "the server to be gone", detail=_log(runner.err_path))
        stderr = runner.stderr()
        assert "run.sh: stopped" in stderr
        assert "restarting" not in stderr
        assert "Finished server process" in stderr  # a graceful uvicorn shutdown, not a kill
        assert _health(port) is None
        wait_until(lambda: not _group(runner.pid), STOP_S, "run.sh's process group to be gone")


def test_run_sh_with_an_invalid_setting_says_only_that(tmp_path: Path) -> None:
    with run_sh(tmp_path, free_port(), POLYTTS_PORT="notaport") as runner:
        assert runner.wait(FIRST_HEALTH_S) == 2
        stderr = runner.stderr()
    assert "POLYTTS_PORT" in stderr and "invalid configuration" in stderr
    assert "could not be assembled" not in stderr and "Traceback" not in stderr
