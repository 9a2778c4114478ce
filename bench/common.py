"""What every benchmark shares: a server of its own, the host it ran on, figures in sections, JSON results.

A benchmark is a module run from the repository root, `python -m bench.<figure> [--url URL] [--out PATH]`: without
`--url` it starts `server.py` on a free port (`local_server`), and it writes one JSON file to
`bench/results/<figure>-<UTC time>.json` (`new_report`, `write_report`: host, load average, commit, flags and its
figures), then prints a short table (`run_main`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from engines.cpu_flags import cpu_flags

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

PROBE = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
"""The client of the benchmarks' and the tests' polls and quick requests to a server (/ready, /health, /metrics, a
one-off call): `httpx.get` builds a client at every call, about 20 ms of CPU for its TLS context, taken from the server
being waited for or measured when a poll runs twenty times a second. Like `httpx.get` it keeps no connection between
requests; it can be shared between threads."""

SHORT_TEXT = "The quick brown fox jumps over the lazy dog near the riverbank."
SIXTY_WORDS = (
    "Streaming speech lets an application start playing audio long before the whole answer is ready. "
    "The service splits the text into sentences, keeps the first piece short, and sends each piece as soon "
    "as the model produces it. Listeners hear the first words almost at once, while the rest of the "
    "paragraph is still being generated in the background on the same machine."
)


@dataclass(frozen=True)
class LocalServer:
    """A server.py this benchmark started: where to reach it, its process, and its data folders."""

    url: str
    pid: int
    voices_dir: Path
    cache_dir: Path
    log_path: Path | None
    """Where its output goes, when asked for (else it shares this process's stdout and stderr)."""


@contextlib.contextmanager
def local_server(
    extra_env: Mapping[str, str] | None = None, caches: bool = False, log_path: Path | None = None
) -> Iterator[LocalServer]:
    """server.py on a free port with its own voices and cache folders; caches off unless asked (their default sizes
    then); `extra_env` adds or overrides POLYTTS_* variables (POLYTTS_VOICES_DIR: a prepared folder); its output to
    `log_path` if given. Yields it once `/ready`; stopped on exit."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        env = {
            **os.environ,
            "POLYTTS_PORT": str(port),
            "POLYTTS_HOST": "127.0.0.1",
            "POLYTTS_VOICES_DIR": f"{tmp}/voices",
            "POLYTTS_CACHE_DIR": f"{tmp}/cache",
            "POLYTTS_LOG_LEVEL": "warning",
        }
        if not caches:
            env |= {"POLYTTS_MEMORY_CACHE_BYTES": "0", "POLYTTS_PCM_CACHE_BYTES": "0"}
        env |= dict(extra_env or {})
        output = stack.enter_context(open(log_path, "ab")) if log_path else None
        proc = subprocess.Popen([sys.executable, "server.py"], cwd=ROOT, env=env, stdout=output, stderr=output)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc)
            yield LocalServer(url, proc.pid, Path(env["POLYTTS_VOICES_DIR"]), Path(env["POLYTTS_CACHE_DIR"]), log_path)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def wait_ready(url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it was ready")
        try:
            if PROBE.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s")


def wait_idle(client: httpx.Client, timeout: float = 120.0) -> bool:
    """Until the server has no synthesis running or waiting (dropped jobs finish the step under way first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        inflight = client.get("/health").json().get("inflight", {})
        if not inflight.get("running") and not inflight.get("waiting"):
            return True
        time.sleep(0.2)
    return False


def load_average() -> list[float] | None:
    with contextlib.suppress(OSError):
        return [round(x, 2) for x in os.getloadavg()]
    return None


def commit() -> dict[str, Any]:
    """HEAD's commit and whether the working tree had uncommitted changes (worktrees included)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": git("rev-parse", "--short=12", "HEAD"), "dirty": bool(status) if status is not None else None}


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": load_average(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        info["cpu_flags"] = cpu_flags()
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    for module in ("onnxruntime", "httpx", "numpy"):
        with contextlib.suppress(Exception):
            info[f"{module}_version"] = __import__(module).__version__
    return info


def new_report(benchmark: str, args: Any) -> dict[str, Any]:
    """The head of every result file: what ran, when, where, at which commit, with which flags."""
    return {
        "benchmark": benchmark,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": host_info(),
        "commit": commit(),
        "flags": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "figures": {},
    }


def server_view(url: str) -> dict[str, Any]:
    """What the server says about itself that a result needs: engines, device, limits."""
    with httpx.Client(base_url=url, timeout=30) as client:
        health = client.get("/health").json()
    return {
        "url": url,
        "engines": health.get("engines"),
        "device": health.get("device"),
        "limits": health.get("limits"),
    }


def section(report: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    """Run one figure into `report["figures"][name]`; a failure is recorded there and the other figures still run."""
    sys.stderr.write(f"[{report['benchmark']}] {name} ...\n")
    started = time.perf_counter()
    before = load_average()
    try:
        result = fn()
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        sys.stderr.write(f"[{report['benchmark']}] {name} failed: {exc}\n")
    result["elapsed_s"] = time.perf_counter() - started
    result["load_average_before_after"] = [before, load_average()]
    report["figures"][name] = result


def figure_main(
    benchmark: str,
    parser: argparse.ArgumentParser,
    measure: Callable[[str, argparse.Namespace], dict[str, Any]],
    describe: Callable[[dict[str, Any]], str],
    server_env: Callable[[argparse.Namespace], Mapping[str, str]] | None = None,
    caches: bool = False,
) -> int:
    """The `main` of a benchmark that measures one figure, named after it, on one server: `--url`'s (the parser has
    it), else its own (`local_server(server_env(args), caches)`). Adds `--out` to the parser, runs `measure(url, args)` and
    prints `describe(figure)`. The figure's `failed` list (checks that did not hold), or its error, fails the run."""
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()

    def run() -> dict[str, Any]:
        report = new_report(benchmark, args)
        with contextlib.ExitStack() as stack:
            env = server_env(args) if server_env else None
            url = args.url or stack.enter_context(local_server(env, caches)).url
            report["server"] = server_view(url)
            section(report, benchmark, lambda: measure(url, args))
        figure = report["figures"][benchmark]
        report["failed"] = [benchmark] if "error" in figure else figure.get("failed", [])
        return report

    def summary(report: dict[str, Any]) -> str:
        figure = report["figures"][benchmark]
        return f"{benchmark} failed: {figure['error']}" if "error" in figure else describe(figure)

    return run_main(benchmark, run, args.out, summary)


def write_report(report: dict[str, Any], out: Path | None = None) -> Path:
    """bench/results/<benchmark>-<UTC time>.json unless `out` says otherwise; returns the path."""
    report.setdefault("host", {})["load_average_end"] = load_average()
    path = out or RESULTS / f"{report['benchmark']}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def int_list(value: str) -> list[int]:
    """A comma-separated command-line list of integers ("1,2,3")."""
    return [int(n) for n in value.split(",")]


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(values),
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "p95": ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))],
        "min": ordered[0],
        "max": ordered[-1],
    }


def server_timing(header: str) -> dict[str, float | str]:
    """`queue;dur=1.0, chars;desc="61"` -> {"queue_s": 0.001, "chars": "61"}."""
    out: dict[str, float | str] = {}
    for part in header.split(","):
        name, *fields = (f.strip() for f in part.split(";"))
        for field in fields:
            key, _, value = field.partition("=")
            if key == "dur":
                out[f"{name}_s"] = float(value) / 1000
            elif key == "desc":
                out[name] = value.strip('"')
    return out


def measure_stream(
    client: httpx.Client, text: str, voice: str | None = None, headers: Mapping[str, str] | None = None
) -> dict[str, float | str]:
    """One `/tts/stream` read as fast as it comes: time to first audio, total, audio seconds, real-time factor."""
    body = {"text": text, "language": "en", **({"voice_id": voice} if voice else {})}
    started = time.perf_counter()
    first = None
    size = 0
    with client.stream("POST", "/tts/stream", json=body, headers=dict(headers or {})) as response:
        response.raise_for_status()
        rate = int(response.headers["x-sample-rate"])
        cache = response.headers.get("x-cache", "")
        for chunk in response.iter_raw():
            if first is None:
                first = time.perf_counter() - started
            size += len(chunk)
    total = time.perf_counter() - started
    audio = size / 2 / rate
    return {"ttfa_s": first or total, "total_s": total, "audio_s": audio, "rtf": total / audio, "cache": cache}


@dataclass
class Playback:
    """A listener that starts playing at the first audio, plays in real time and pauses whenever it runs dry: what
    a client playing a stream as it arrives hears. Times are `time.perf_counter()` readings."""

    began: float
    """When the request started (time to first audio counts from here)."""
    first_audio: float | None = None
    audio_s: float = 0.0
    underrun_s: float = 0.0
    """Time spent paused after the first audio, waiting for more."""
    stalls: int = 0
    max_stall_s: float = 0.0
    plays_until: float | None = None
    """When what has arrived so far will have been played."""

    def heard(self, seconds: float, now: float) -> None:
        """`seconds` of audio arrived at `now`."""
        if self.plays_until is None:
            self.first_audio = now
            self.plays_until = now
        elif now > self.plays_until:
            stall = now - self.plays_until
            self.underrun_s += stall
            self.stalls += 1
            self.max_stall_s = max(self.max_stall_s, stall)
            self.plays_until = now
        self.plays_until += seconds
        self.audio_s += seconds

    @property
    def ttfa_s(self) -> float | None:
        return None if self.first_audio is None else self.first_audio - self.began

    def public(self) -> dict[str, Any]:
        return {
            "ttfa_s": self.ttfa_s,
            "audio_s": self.audio_s,
            "underrun_s": self.underrun_s,
            "stalls": self.stalls,
            "max_stall_s": self.max_stall_s,
        }


@dataclass(frozen=True)
class LocalEngine:
    """An engine loaded in this process (`in_process_engine`)."""

    name: str
    sample_rate: int
    voice: str
    speak: Callable[[str], Iterator[Any]]
    """Speaks a text as the service does: its chunks, each through the same seam joiner; float32 pieces."""
    raw: Callable[[str], Iterator[Any]]
    """Speaks a text as a library caller would: the whole text (as spoken) in one call to the engine, no chunks."""


@contextlib.contextmanager
def in_process_engine(voice_name: str | None = None, **overrides: Any) -> Iterator[LocalEngine]:
    """An engine built and loaded in this process the way the server builds it (the default engine, and `overrides`
    as settings), with a function that speaks as the service does. For measuring the engine without the service."""
    from engines import ENGINE_SPECS, FAMILIES
    from engines.base import SynthesisOptions
    from gpu.engine_pool import build_engines
    from lifecycle.plan import chunk_caps
    from lifecycle.voicing import Voicing
    from settings import load_settings
    from text.languages import resolve_language

    settings = load_settings(**overrides)
    engine = build_engines(settings, ENGINE_SPECS)[settings.default_engine]
    engine.load()
    try:
        engine.warmup()
        name = voice_name or settings.default_voice
        voice = next((v for v in engine.builtin_voices() if v.name == name), None)
        if voice is None:
            raise SystemExit(f"{name!r} is not a built-in voice of {engine.name}; pass --voice")
        options = SynthesisOptions(resolve_language(voice.language), FAMILIES[engine.name].param_defaults())

        def speak(text: str) -> Iterator[Any]:
            chunks = engine.spoken_text(text, options).chunks(*chunk_caps(engine, None, None))
            voicing = Voicing(engine, options, timed=False)
            for index, chunk in enumerate(chunks):
                yield from voicing.chunk(chunk, engine.prepare_voice(voice), last=index == len(chunks) - 1)
            engine.release()

        def raw(text: str) -> Iterator[Any]:
            yield from engine.stream(engine.spoken_text(text, options).text, engine.prepare_voice(voice), options)
            engine.release()

        yield LocalEngine(engine.name, engine.sample_rate, name, speak, raw)
    finally:
        engine.unload()


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every `finally` (and server shutdown) runs."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def reap_children(grace: float = 10.0) -> list[int]:
    """Safety net after the servers' own shutdown: terminate, then kill, any child process still running, by pid.
    Returns the pids that had to be killed."""
    left = _children()
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        for pid in list(left):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    left.remove(pid)
        left = [pid for pid in left if pid in _children()]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def run_main(
    benchmark: str, run: Callable[[], dict[str, Any]], out: Path | None, summary: Callable[[dict[str, Any]], str]
) -> int:
    """The end of every script's `main`: run, stop leftover servers, write the JSON, print a summary. The exit status
    is 1 when the report lists what `failed` (a check that did not hold), else 0."""
    stop_on_sigterm()
    try:
        report = run()
    finally:
        killed = reap_children()
        if killed:
            sys.stderr.write(f"[{benchmark}] killed leftover child processes {killed}\n")
    path = write_report(report, out)
    sys.stdout.write(summary(report) + "\n")
    sys.stdout.write(f"wrote {path}\n")
    return 1 if report.get("failed") else 0
