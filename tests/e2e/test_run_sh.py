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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.common import PROBE
from tests.support.polling import wait_until
from tests.support.servers import ROOT, free_port
from web.serving import SIGNALS_TOGETHER_S

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
            "POLYTTS_KOKORO_ONNX_ROUTE": "int8",  # as every test server (tests/support/servers.py)
            "POLYTTS_ONNX_THREADS": "1",  # likewise: the same audio, without threads spinning on the other worker's cores
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
        return PROBE.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
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


INVALID_SETTINGS = [  # (variable, value): read by every step that loads the service's settings
    ("POLYTTS_API_KEYS", "s3cret"),  # not JSON (a secret: never repeated)
    ("POLYTTS_PORT", "abc"),
    ("POLYTTS_PORT", "70000"),
    ("POLYTTS_RUNTIME", "tpu"),
    ("POLYTTS_FAIRNESS_WEIGHTS", "{interactive: 2}"),  # not JSON
    ("POLYTTS_OPENAI_VOICES", '["alloy"]'),  # JSON, of the wrong shape
    ("POLYTTS_IDLE_EVICT_SECONDS", "-1"),
    ("POLYTTS_LOG_LEVEL", "loud"),
    ("POLYTTS_KOKORO_BACKEND", "tensorrt"),  # an engine family's own settings
    ("POLYTTS_VOXCPM_MAX_LEN", "long"),
]
STEPS = {"settings": ["-m", "settings"], "server": ["server.py"]}
"""What run.sh runs that loads the service's settings: `python -m settings` first, then the server."""


def _step(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run one of run.sh's steps (`python ARGS`) in `env`: its exit status and its stderr."""
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, timeout=60)
    return done.returncode, done.stderr.decode(errors="replace")


def _says_only(stderr: str, variable: str) -> None:
    """One line, naming the variable, and no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0] and "invalid configuration" in lines[0], stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize(("name", "value"), INVALID_SETTINGS)
def test_an_invalid_setting_is_one_line_naming_it_and_exit_2(tmp_path: Path, step: str, name: str, value: str) -> None:
    code, stderr = _step(STEPS[step], _env(tmp_path, free_port(), **{name: value}))
    assert code == 2, stderr
    _says_only(stderr, name)
    assert "s3cret" not in stderr  # a key's value never reaches a log


def test_the_server_takes_no_arguments_and_its_help_names_the_settings(tmp_path: Path) -> None:
    """`python server.py --port 9` would otherwise serve on the default port, the argument ignored."""
    env = _env(tmp_path, free_port())
    done = subprocess.run([sys.executable, "server.py", "--help"], cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0 and b"POLYTTS_PORT" in done.stdout and b"docs/settings.md" in done.stdout
    code, stderr = _step([*STEPS["server"], "--port", "9"], env)
    assert code == 2 and "unrecognized arguments: --port 9" in stderr, stderr


def test_an_address_of_no_interface_here_is_an_invalid_host(tmp_path: Path) -> None:
    env = _env(tmp_path, free_port(), POLYTTS_HOST="192.0.2.1")  # TEST-NET-1: on no interface of any host
    code, stderr = _step(STEPS["server"], env)
    assert code == 2, stderr
    _says_only(stderr, "POLYTTS_HOST")


@pytest.mark.parametrize("variable", ["POLYTTS_KOKORO_ONNX_DIR", "POLYTTS_MODELS_DIR"])
def test_models_assemble_refuses_a_folder_it_would_have_to_delete(tmp_path: Path, variable: str) -> None:
    """models.assemble replaces its folder whole: one that holds other files (POLYTTS_KOKORO_ONNX_DIR), or that
    would lie under a file (POLYTTS_MODELS_DIR), is named as invalid, exit 2, and left as it is."""
    env = _env(tmp_path, free_port())
    del env["POLYTTS_KOKORO_ONNX_DIR"]
    placed = tmp_path / "placed"
    if variable == "POLYTTS_KOKORO_ONNX_DIR":
        placed.mkdir()
        (placed / "notes.txt").write_text("not the model's")
    else:
        placed.write_text("a file")
    code, stderr = _step(["-m", "models.assemble"], {**env, variable: str(placed)})
    assert code == 2, stderr
    _says_only(stderr, variable)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["placed"]  # nothing built beside it
    assert placed.is_file() or [p.name for p in placed.iterdir()] == ["notes.txt"]


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


# --- stop requests: signals that come together are one (a drain), a later one stops at once -------------------

SPOKEN = " ".join(f"Sentence number {i} is still being spoken when the node is asked to stop." for i in range(2))
"""About 9 s of speech, seconds of work: under way when the signals come, a fraction of a second apart."""
LONGER = " ".join([SPOKEN] * 6)
DRAINING = {"POLYTTS_DRAIN_SECONDS": "600", "POLYTTS_MEMORY_CACHE_BYTES": "0", "POLYTTS_PCM_CACHE_BYTES": "0"}
"""A drain that never runs out in these tests (each is about the signals, not the bound); no cache answers."""
TOGETHER_S = 0.2
"""The second signal of one stop request comes this long after the first: a supervisor's "a moment later", well
inside web.serving.SIGNALS_TOGETHER_S."""


def _under_way(port: int, count: int) -> bool:
    """`count` syntheses admitted (running or waiting for the GPU thread)."""
    body = _health(port)
    return body is not None and body["inflight"]["running"] + body["inflight"]["waiting"] >= count


def _audio(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text[:300]
    assert answer.headers["content-type"] == "audio/wav" and len(answer.content) > 48_000


def test_ctrl_c_then_sigterm_to_run_sh_is_one_drain_and_the_request_under_way_finishes(tmp_path: Path) -> None:
    """A terminal's Ctrl+C is a SIGINT to run.sh's whole group; run.sh passes a SIGTERM on, and a supervisor may
    send run.sh its own a moment later: all one stop request."""
    port = free_port()
    with run_sh(tmp_path, port, **DRAINING) as runner, ThreadPoolExecutor(1) as pool:
        runner.health()
        speaking = pool.submit(httpx.post, f"http://127.0.0.1:{port}/tts", json={"text": SPOKEN}, timeout=300)
        wait_until(lambda: _under_way(port, 1), 60, "the /tts to be under way", detail=_log(runner.err_path))
        os.killpg(runner.pid, signal.SIGINT)
        time.sleep(TOGETHER_S)  # the scenario's interval, not a wait for a state
        runner.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        _audio(speaking.result(300))
        answered = time.monotonic()
        assert runner.wait(STOP_S) == 0, runner.stderr()
        exited_in = time.monotonic() - answered
        stderr = runner.stderr()
    assert "Traceback" not in stderr and "cutting" not in stderr and "second stop request" not in stderr, stderr
    assert "SIGINT: stop requested" in stderr and "the same stop request" in stderr
    assert "run.sh: stopped" in stderr and "restarting" not in stderr
    assert exited_in < STOP_S, f"run.sh exited {exited_in:.1f}s after the request was answered"


def _signalled_server(tmp: Path) -> tuple[subprocess.Popen[bytes], Path, int]:
    """A warmed server with DRAINING's settings: its process, its log and its port."""
    port = free_port()
    proc, err = _server(tmp, port, POLYTTS_WARM_ON_START="true", **DRAINING)
    wait_until(lambda: (_health(port) or {}).get("status") == "ready", 120, "the server to be ready", detail=_log(err))
    return proc, err, port


def test_two_sigterms_close_together_are_one_drain(tmp_path: Path) -> None:
    proc, err, port = _signalled_server(tmp_path)
    try:
        with ThreadPoolExecutor(1) as pool:
            speaking = pool.submit(httpx.post, f"http://127.0.0.1:{port}/tts", json={"text": SPOKEN}, timeout=300)
            wait_until(lambda: _under_way(port, 1), 60, "the /tts to be under way", detail=_log(err))
            proc.send_signal(signal.SIGTERM)
            time.sleep(TOGETHER_S)  # the scenario's interval, not a wait for a state
            proc.send_signal(signal.SIGTERM)
            _audio(speaking.result(300))
        assert proc.wait(STOP_S) == 0, err.read_text()
        log = err.read_text()
        assert "the same stop request" in log and "second stop request" not in log and "cutting" not in log, log
        assert "Traceback" not in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_second_stop_request_later_cuts_at_once_by_closing_connections(tmp_path: Path) -> None:
    """SIGTERM, then another after a clear interval: what still runs is cut at once. A stream under way and a
    whole-file /tts both see their connection closed: never a 500 after the headers or a text/plain body."""
    proc, err, port = _signalled_server(tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=120) as client, ThreadPoolExecutor(1) as pool:
            whole = pool.submit(client.post, "/tts", json={"text": LONGER})
            with client.stream("POST", "/tts/stream", json={"text": LONGER}) as stream:
                assert stream.status_code == 200
                chunks = stream.iter_raw()
                next(chunks)
                wait_until(lambda: _under_way(port, 2), 60, "both requests to be under way", detail=_log(err))
                proc.send_signal(signal.SIGTERM)
                first = time.monotonic()
                wait_until(lambda: PROBE.get(url + "/ready").status_code == 503, 10, "the drain to begin")
                time.sleep(max(0.0, first + SIGNALS_TOGETHER_S + 0.5 - time.monotonic()))  # the clear interval
                proc.send_signal(signal.SIGTERM)
                second = time.monotonic()
                with pytest.raises(httpx.TransportError) as cut:
                    for _ in chunks:
                        pass
            assert not isinstance(cut.value, httpx.TimeoutException), repr(cut.value)
            closed = whole.exception(60)
            assert isinstance(closed, httpx.TransportError) and not isinstance(closed, httpx.TimeoutException), (
                whole.result() if closed is None else repr(closed)
            )
        assert proc.wait(20) == 0, err.read_text()
        stopped_in = time.monotonic() - second
        log = err.read_text()
        assert "a second stop request" in log and "cutting 2 synthesis(es)" in log, log
        assert "Traceback" not in log and "Exception in ASGI application" not in log, log
        assert stopped_in < 15, f"the server took {stopped_in:.1f}s to stop"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    "variable", ["POLYTTS_PORT", "POLYTTS_API_KEYS", "POLYTTS_KOKORO_ONNX_DIR"], ids=["settings", "json", "assemble"]
)
def test_run_sh_with_an_invalid_setting_says_only_that(tmp_path: Path, variable: str) -> None:
    """Whichever step reads it first (`python -m settings`, or `python -m models.assemble` for where the model
    goes): its one line, and run.sh exits 2 with nothing to add."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not the model's")
    value = {
        "POLYTTS_PORT": "notaport",
        "POLYTTS_API_KEYS": "s3cret",
        "POLYTTS_KOKORO_ONNX_DIR": str(tmp_path / "mine"),
    }
    with run_sh(tmp_path, free_port(), **{variable: value[variable]}) as runner:
        assert runner.wait(FIRST_HEALTH_S) == 2, runner.stderr()
        stderr = runner.stderr()
    said = [line for line in stderr.splitlines() if "invalid configuration" in line]
    assert len(said) == 1 and variable in said[0], stderr
    assert "could not be assembled" not in stderr and "Traceback" not in stderr and "s3cret" not in stderr


def test_run_sh_setup_derives_the_float_graph_where_the_route_may_take_openvino(tmp_path: Path) -> None:
    """Once, at setup, not at the server's first load (kept after: derived again only when the model changes)."""
    env = _env(tmp_path, free_port(), POLYTTS_KOKORO_ONNX_ROUTE="openvino-f32")
    done = subprocess.run(["./run.sh", "setup"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Kokoro's float graph for OpenVINO: " in done.stderr
    assert (ROOT / "models" / "kokoro-82m-int8" / "openvino" / "model.xml").is_file()
    kept = subprocess.run(
        ["./run.sh", "setup"], cwd=ROOT, env=_env(tmp_path, free_port()), capture_output=True, text=True, timeout=300
    )
    assert kept.returncode == 0 and "float graph" not in kept.stderr  # int8: nothing derived
