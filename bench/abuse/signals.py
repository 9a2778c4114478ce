"""Probes of stopping and of configuration: a Ctrl+C under run.sh drains, a second stop request later cuts at once
without a 500 or a traceback, and an invalid setting is one line naming it (exit 2) at whichever step reads it first.

Each probe starts processes of its own (run.sh, server.py, run.sh's set-up steps) on a port and in folders of its
own, whatever the target; the target records the outcomes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx

from bench.abuse.probing import Answer, Target, expect
from bench.common import PROBE, ROOT, SIXTY_WORDS, wait_ready

SERVED = {"POLYTTS_DRAIN_SECONDS": "600", "POLYTTS_MEMORY_CACHE_BYTES": "0", "POLYTTS_PCM_CACHE_BYTES": "0"}
"""A drain that never runs out (the probes are about the signals), and no cached answers."""
MOMENT_S = 0.2
"""'A moment later': the second signal of one stop request (web.serving.SIGNALS_TOGETHER_S is 2 s)."""
CLEAR_INTERVAL_S = 2.5
"""A second stop request comes this long after the first."""
PROMPT_S = 5.0
"""A stop is prompt when the process exits within this after the work it waited for (or after a second request)."""
INVALID = [  # (variable, value, the steps that read it first or again)
    ("POLYTTS_API_KEYS", "s3cret", ("settings", "server")),
    ("POLYTTS_PORT", "eighty", ("settings", "server")),
    ("POLYTTS_RUNTIME", "tpu", ("settings", "server")),
    ("POLYTTS_FAIRNESS_WEIGHTS", "{batch: 1}", ("settings", "server")),
    ("POLYTTS_OPENAI_VOICES", "alloy=af_heart", ("settings", "server")),
    ("POLYTTS_ONNX_THREADS", "-1", ("settings", "server")),
    ("POLYTTS_HOST", "192.0.2.1", ("server",)),
    ("POLYTTS_KOKORO_ONNX_DIR", "{folder}", ("assemble",)),
]
STEPS = {"settings": ["-m", "settings"], "assemble": ["-m", "models.assemble"], "server": ["server.py"]}


def _env(folder: Path, **extra: str) -> dict[str, str]:
    """A configuration of its own under `folder` (none of the caller's POLYTTS_*), on a free port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {key: value for key, value in os.environ.items() if not key.startswith("POLYTTS_")}
    env |= {
        "POLYTTS_HOST": "127.0.0.1",
        "POLYTTS_PORT": str(port),
        "POLYTTS_VOICES_DIR": str(folder / "voices"),
        "POLYTTS_CACHE_DIR": str(folder / "cache"),
        "POLYTTS_VENV": sys.prefix,  # run.sh serves from this environment: it creates none
        "PYTHONUNBUFFERED": "1",
        **SERVED,
        **extra,
    }
    return env


@contextlib.contextmanager
def _started(command: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """`command` (run.sh or server.py) in a session of its own, serving once ready: its process, url and output."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = _env(folder)
        output = folder / "output.log"
        with open(output, "wb") as sink:
            proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
                # as a terminal gives it: a process started in the background begins with SIGINT ignored
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        try:
            url = f"http://127.0.0.1:{env['POLYTTS_PORT']}"
            wait_ready(url, proc)
            yield proc, url, output
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _under_way(url: str, count: int, timeout: float = 60.0) -> None:
    """Return once `count` syntheses are admitted (running or waiting for the GPU thread)."""
    deadline = time.monotonic() + timeout
    while True:
        load = PROBE.get(url + "/health", timeout=5).json()["inflight"]
        if load["running"] + load["waiting"] >= count:
            return
        expect(time.monotonic() < deadline, f"{count} request(s) not under way after {timeout:.0f} s")
        time.sleep(0.05)


def _traceback(output: Path) -> str:
    said = output.read_text(errors="replace")
    return said[said.find("Traceback") :][:300] if "Traceback" in said else ""


def _spoken(answer: Future[httpx.Response]) -> str:
    """How the request under way ended: its status and type, or the transport error that ended it."""
    try:
        response = answer.result(300)
    except httpx.TransportError as exc:
        return type(exc).__name__
    return f"{response.status_code} {response.headers.get('content-type', '')}".strip()


def ctrl_c_under_run_sh() -> Answer:
    """SIGINT to run.sh's whole group (a terminal's Ctrl+C), SIGTERM to run.sh a moment later, a /tts under way:
    one drain, the /tts answered whole, run.sh out promptly after it."""
    with _started(["./run.sh"]) as (proc, url, output), ThreadPoolExecutor(1) as pool:
        answer = pool.submit(httpx.post, url + "/tts", json={"text": SIXTY_WORDS}, timeout=300)
        _under_way(url, 1)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(MOMENT_S)
        proc.send_signal(signal.SIGTERM)
        spoken = _spoken(answer)
        answered = time.monotonic()
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            code = None
        exited_s = time.monotonic() - answered
        traceback = _traceback(output)
    status = f"{spoken}, exit {code}"
    expect(spoken == "200 audio/wav", f"the request under way got {spoken}")
    expect(code == 0 and exited_s < PROMPT_S, f"run.sh: exit {code} {exited_s:.1f} s after the answer")
    expect(not traceback, f"run.sh's output holds a traceback: {traceback}")
    return Answer(status, f"run.sh exited {exited_s:.1f} s after the answer; no traceback")


def sigterm_twice() -> Answer:
    """Two SIGTERMs a moment apart to server.py, a /tts under way: one drain, the /tts answered whole."""
    with _started([sys.executable, "server.py"]) as (proc, url, output), ThreadPoolExecutor(1) as pool:
        answer = pool.submit(httpx.post, url + "/tts", json={"text": SIXTY_WORDS}, timeout=300)
        _under_way(url, 1)
        proc.send_signal(signal.SIGTERM)
        time.sleep(MOMENT_S)
        proc.send_signal(signal.SIGTERM)
        spoken = _spoken(answer)
        code = proc.wait(60)
        traceback, said = _traceback(output), output.read_text(errors="replace")
    expect(spoken == "200 audio/wav", f"the request under way got {spoken}")
    expect(code == 0 and "cutting" not in said, f"exit {code}; the drain cut: {'cutting' in said}")
    expect(not traceback, f"a traceback in the log: {traceback}")
    return Answer(f"{spoken}, exit {code}", "one drain; no traceback")


def second_stop_request() -> Answer:
    """SIGTERM, then another after a clear interval, a stream and a whole-file /tts under way: both cut at once,
    their connections closed (never a 500 or a text/plain body), exit 0, no traceback."""
    text = " ".join([SIXTY_WORDS] * 3)
    with _started([sys.executable, "server.py"]) as (proc, url, output), ThreadPoolExecutor(1) as pool:
        with httpx.Client(base_url=url, timeout=120) as client:
            whole = pool.submit(client.post, "/tts", json={"text": text})
            with client.stream("POST", "/tts/stream", json={"text": text}) as stream:
                chunks = stream.iter_raw()
                next(chunks)
                _under_way(url, 2)
                proc.send_signal(signal.SIGTERM)
                time.sleep(CLEAR_INTERVAL_S)
                proc.send_signal(signal.SIGTERM)
                second = time.monotonic()
                try:
                    streamed = f"{sum(len(chunk) for chunk in chunks)} more bytes, complete"
                except httpx.TransportError as exc:
                    streamed = type(exc).__name__
            spoken = _spoken(whole)
        code = proc.wait(60)
        stopped_s = time.monotonic() - second
        traceback = _traceback(output)
    status = f"stream {streamed}, /tts {spoken}"
    expect("complete" not in streamed and not spoken[:1].isdigit(), f"not both cut: {status}")
    expect(code == 0 and stopped_s < 15, f"exit {code} {stopped_s:.1f} s after the second request")
    expect(not traceback, f"a traceback in the log: {traceback}")
    return Answer(status, f"exit {code} {stopped_s:.1f} s after the second request; no traceback")


def bad_settings() -> Answer:
    """Each invalid setting through each step that reads it: exit 2, one line naming it, no traceback."""
    seen, wrong = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "mine").mkdir()
        (folder / "mine" / "notes.txt").write_text("a folder of someone else's, not the model's")
        for variable, value, steps in INVALID:
            env = _env(folder, **{variable: value.replace("{folder}", str(folder / "mine"))})
            for step in steps:
                done = subprocess.run(
                    [sys.executable, *STEPS[step]], cwd=ROOT, env=env, capture_output=True, timeout=120
                )
                lines = done.stderr.decode(errors="replace").strip().splitlines()
                seen.append(f"{done.returncode}")
                one_line = len(lines) == 1 and variable in lines[0] and "Traceback" not in lines[0]
                if done.returncode != 2 or not one_line or "s3cret" in " ".join(lines):
                    wrong.append(f"{step} {variable}: exit {done.returncode}, {len(lines)} line(s): {lines[-1:]}")
    codes = ", ".join(f"{code} x{seen.count(code)}" for code in sorted(set(seen)))
    expect(not wrong, f"exit {codes}; " + "; ".join(wrong)[:600])
    return Answer(f"exit {codes}", f"{len(seen)} runs, each one line naming its variable")


def probes(target: Target, own: bool) -> None:
    """Every probe here; they start processes of their own, so any target will do."""
    target.probe("Ctrl+C to run.sh's group, SIGTERM after", ctrl_c_under_run_sh)
    target.probe("SIGTERM twice a moment apart", sigterm_twice)
    target.probe("SIGTERM, a second one 2.5 s later", second_stop_request)
    target.probe("invalid settings at each step", bad_settings)
