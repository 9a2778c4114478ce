"""Fairness, overhead and cache benchmark over HTTP.

    python bench/fairness.py                 # starts its own servers (caches off, then caches on), then stops them
    python bench/fairness.py --url URL       # against a running server started with caches off and
                                             # POLYTTS_FAIRNESS_WEIGHTS='{"gold": 2, "silver": 1}'
    python bench/fairness.py --url URL --cache-url URL2   # ... and a second one with caches on for `cache_hit`

Four figures, each with its goal and whether it was met:

1. `ttfa`: time to first audio of a one-sentence `/tts/stream` request alone, and the same request (another fairness
   key) while a long request (key "batch") streams and is being read; goal: under load <= 2x alone.
2. `gpu_share`: keys "gold" (weight 2) and "silver" (weight 1) each keep requests in flight for a while; the split
   of GPU time (from `/health` `inflight.keys.<key>.used_gpu_s` deltas); goal: gold/silver within 10% of 2.0.
3. `overhead`: `/tts` total time against the Kokoro engine called directly in this process for the same text, built
   the way the server builds it; goal: the service at most 5% slower.
4. `cache_hit`: with caches on, latency of repeated `/tts` and `/tts/stream` cache hits, and throughput of
   sequential and concurrent hits (informational, no goal).

Writes one JSON file (default `bench/results/fairness-<UTC time>.json`). Every server it starts is stopped on exit,
failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python bench/fairness.py`: the project and `bench.stream` importable
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.stream import CASES, local_server, measure  # noqa: E402

WEIGHTS = {"gold": 2.0, "silver": 1.0}
SHORT_TEXT = CASES["one_sentence"]
MEDIUM_TEXTS = [
    "The library opens at nine in the morning and closes at six in the evening. Visitors can borrow up to five "
    "books at a time, and returns are accepted at the front desk or through the slot by the main door.",
    "Our train leaves the central station at half past seven. Please arrive a few minutes early, bring your "
    "ticket, and keep your luggage with you, because the platform is crowded during the morning rush.",
    "Fresh bread is baked every day before sunrise. The bakers mix the flour, water and salt by hand, let the "
    "dough rest for several hours, and shape each loaf carefully before it goes into the hot stone oven.",
]
LONG_TEXT = " ".join(
    [
        "Long documents are a common workload for a speech service: a report, a chapter of a book, or a set of "
        "instructions that somebody wants to listen to while doing something else.",
        "Such a request keeps the model busy for a long time, and a fair scheduler must not let it block short "
        "interactive requests that arrive while it is running.",
        "The service cuts every text into chunks, and each chunk is one model call on the single worker thread.",
        "Between two chunks of the long request the scheduler may run a chunk of another request, so a short "
        "request waits for at most one chunk of the long one before its own first audio is produced.",
        "Listeners of the long request hardly notice the pause, because audio is generated faster than it is "
        "played, and the stream stays ahead of playback by a comfortable margin.",
        "The weights of the fairness keys decide how the worker thread is shared when several keys are busy at "
        "the same time, and a key with twice the weight receives twice the share of model time.",
        "A key that has been idle for a while does not collect credit for the time it was away, otherwise it "
        "could come back and hold the worker thread for a long stretch, starving everybody else.",
        "Caches make repeated requests cheap: the same text with the same voice and the same parameters is "
        "served from memory or from disk, without running the model again.",
        "This paragraph exists only to be long enough for the benchmark, which needs a request that streams for "
        "a good while, so that a short request can be started in the middle of it and timed.",
        "It continues with a few more sentences about nothing in particular, such as the weather, which was mild "
        "and grey all week, with a little rain in the afternoons and a cool wind from the sea.",
        "The harbour was quiet, the fishing boats stayed in, and the gulls walked along the pier looking for "
        "anything that the market stalls had left behind at the end of the day.",
        "By the evening the clouds had cleared, the first stars came out over the hills, and the town settled "
        "into its usual calm, with lights going out one window at a time.",
    ]
)


# ---------------------------------------------------------------------------------------------------------------
# Small helpers


def _stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every `finally` (and server shutdown) runs."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def _children() -> list[int]:
    """Pids of this process's own child processes (the servers this script started)."""
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").glob("*"):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def _reap_children(grace: float = 10.0) -> list[int]:
    """Safety net after the servers' own shutdown: terminate, then kill, any child still running, by its pid."""
    left = _children()
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [pid for pid in left if pid in _children()]
        for pid in list(left):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    left.remove(pid)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {
        "n": len(values),
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "p95": p95,
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


def commit() -> str | None:
    """HEAD's commit, read from .git directly (the working tree may hold uncommitted edits: see `source_sha256`)."""
    git = ROOT / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        if (git / ref).is_file():
            return (git / ref).read_text().strip()[:12]
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0][:12]
    except OSError:
        pass
    return None


def source_hashes() -> dict[str, str]:
    files = ["server.py", "synthesis.py", "scheduler.py", "settings.py", "engines/kokoro.py", "engines/kokoro_onnx.py"]
    return {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest()[:16] for f in files if (ROOT / f).is_file()}


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    for module in ("onnxruntime", "httpx", "numpy"):
        with contextlib.suppress(Exception):
            info[f"{module}_version"] = __import__(module).__version__
    return info


def load_average() -> list[float] | None:
    with contextlib.suppress(OSError):
        return [round(x, 2) for x in os.getloadavg()]
    return None


def wait_idle(client: httpx.Client, timeout: float = 60.0) -> bool:
    """Until the server has no synthesis running or waiting (cancelled jobs finish their current chunk)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        inflight = client.get("/health").json().get("inflight", {})
        if not inflight.get("running") and not inflight.get("waiting"):
            return True
        time.sleep(0.2)
    return False


class LongStream(threading.Thread):
    """A long `/tts/stream` request read as fast as it comes, until it ends or `stop()` closes it."""

    def __init__(self, url: str, key: str, text: str, voice: str | None) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.text, self.voice = url, key, text, voice
        self.first_audio = threading.Event()
        self.done = threading.Event()
        self._halt = threading.Event()
        self.bytes = 0
        self.ttfa_s: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        body = {"text": self.text, "language": "en", **({"voice_id": self.voice} if self.voice else {})}
        started = time.perf_counter()
        try:
            with httpx.Client(base_url=self.url, timeout=600, headers={"X-Fairness-Key": self.key}) as client:
                with client.stream("POST", "/tts/stream", json=body) as response:
                    response.raise_for_status()
                    for chunk in response.iter_raw():
                        if self.ttfa_s is None:
                            self.ttfa_s = time.perf_counter() - started
                            self.first_audio.set()
                        self.bytes += len(chunk)
                        if self._halt.is_set():
                            break
        except Exception as exc:  # noqa: BLE001 - reported
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.first_audio.set()
            self.done.set()

    def stop(self) -> None:
        self._halt.set()
        self.join(60)


# ---------------------------------------------------------------------------------------------------------------
# 1. Time to first audio, alone and behind a long stream


def bench_ttfa(url: str, args: argparse.Namespace) -> dict[str, Any]:
    voice = args.voice

    def client(key: str) -> httpx.Client:
        return httpx.Client(base_url=url, timeout=600, headers={"X-Fairness-Key": key})

    with client("interactive") as interactive:
        measure(interactive, "Warm up.", voice)
        alone = [measure(interactive, SHORT_TEXT, voice) for _ in range(args.runs)]

    def under_load(key_of: Callable[[int], str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        runs: list[dict[str, Any]] = []
        longs: list[dict[str, Any]] = []
        long: LongStream | None = None
        try:
            for i in range(args.runs):
                if long is None or long.done.is_set():
                    if long is not None:
                        longs.append({"ttfa_s": long.ttfa_s, "bytes": long.bytes, "error": long.error})
                    long = LongStream(url, "batch", LONG_TEXT, voice)
                    long.start()
                    long.first_audio.wait(300)
                    if long.error:
                        raise RuntimeError(f"long request failed: {long.error}")
                time.sleep(args.load_delay)  # into the long request, not at a chunk boundary by construction
                if long.done.is_set():
                    raise RuntimeError("the long request ended before the short one started; use a longer text")
                key = key_of(i)
                with client(key) as short:
                    keys = short.get("/health").json().get("inflight", {}).get("keys", {})
                    result = measure(short, SHORT_TEXT, voice)
                result["key"] = key
                result["key_state_at_start"] = {k: keys[k] for k in (key, "batch") if k in keys}
                result["long_still_streaming"] = not long.done.is_set()
                runs.append(result)
        finally:
            if long is not None:
                long.stop()
                longs.append({"ttfa_s": long.ttfa_s, "bytes": long.bytes, "error": long.error})
        return runs, longs

    with client("probe") as probe:
        wait_idle(probe)
        # The same key as the runs alone: whatever GPU time "interactive" used alone is still on its account.
        loaded, long_runs = under_load(lambda i: "interactive")
        wait_idle(probe)
        # A new key per run: the scheduler's intended case (a key becoming busy starts level with the busy ones).
        loaded_fresh, long_runs_fresh = under_load(lambda i: f"interactive-fresh-{i}-{time.time_ns()}")
        wait_idle(probe)

    alone_s = stats([float(r["ttfa_s"]) for r in alone])
    loaded_s = stats([float(r["ttfa_s"]) for r in loaded])
    fresh_s = stats([float(r["ttfa_s"]) for r in loaded_fresh])
    ratio = loaded_s["median"] / alone_s["median"]
    fresh_ratio = fresh_s["median"] / alone_s["median"]
    return {
        "goal": "ttfa_under_load_s median <= 2 x ttfa_alone_s median",
        "met": ratio <= 2.0,
        "ttfa_alone_s": alone_s,
        "ttfa_under_load_s": loaded_s,
        "ratio": ratio,
        "diagnostic_fresh_key": {
            "what": "the same short request under the same load, but with a fairness key never used before each time",
            "ttfa_under_load_s": fresh_s,
            "ratio": fresh_ratio,
            "met_if_this_were_the_figure": fresh_ratio <= 2.0,
        },
        "setup": {
            "short_text": SHORT_TEXT,
            "short_key": "interactive (the same key for the runs alone and under load)",
            "long_key": "batch",
            "long_words": len(LONG_TEXT.split()),
            "long_chars": len(LONG_TEXT),
            "short_started_s_after_long_first_audio": args.load_delay,
            "runs": args.runs,
        },
        "runs": {"alone": alone, "under_load": loaded, "under_load_fresh_key": loaded_fresh},
        "long_requests": {"under_load": long_runs, "under_load_fresh_key": long_runs_fresh},
    }


# ---------------------------------------------------------------------------------------------------------------
# 2. GPU-time split between weighted keys


async def _share(url: str, args: argparse.Namespace) -> dict[str, Any]:
    voice = args.voice
    requests: dict[str, list[dict[str, Any]]] = {key: [] for key in WEIGHTS}
    errors: dict[str, list[str]] = {key: [] for key in WEIGHTS}
    stop = asyncio.Event()

    async def worker(client: httpx.AsyncClient, key: str, index: int) -> None:
        n = index
        while not stop.is_set():
            text = MEDIUM_TEXTS[n % len(MEDIUM_TEXTS)]
            n += 1
            body: dict[str, Any] = {"text": text, "language": "en", **({"voice_id": voice} if voice else {})}
            if args.share_max_chars:
                body["max_chars_per_gen"] = args.share_max_chars
            started = time.perf_counter()
            try:
                response = await client.post("/tts", json=body, headers={"X-Fairness-Key": key})
            except httpx.HTTPError as exc:
                errors[key].append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)
                continue
            if response.status_code != 200:
                errors[key].append(f"{response.status_code}: {response.text[:200]}")
                await asyncio.sleep(0.5)
                continue
            timing = server_timing(response.headers.get("server-timing", ""))
            requests[key].append(
                {
                    "started": started,
                    "ended": time.perf_counter(),
                    "synth_s": timing.get("synth_s"),
                    "queue_s": timing.get("queue_s"),
                }
            )

    limits = httpx.Limits(max_connections=4 * args.share_inflight * len(WEIGHTS))
    series: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def used() -> dict[str, float]:
            keys = (await client.get("/health")).json().get("inflight", {}).get("keys", {})
            return {key: float(keys[key]["used_gpu_s"]) if key in keys else 0.0 for key in WEIGHTS}

        tasks = [asyncio.create_task(worker(client, key, i)) for key in WEIGHTS for i in range(args.share_inflight)]
        try:
            await asyncio.sleep(args.share_warmup)
            t0 = time.perf_counter()
            before = await used()
            series.append({"t": 0.0, **before})
            while (elapsed := time.perf_counter() - t0) < args.share_seconds:
                await asyncio.sleep(min(0.5, args.share_seconds - elapsed))
                series.append({"t": round(time.perf_counter() - t0, 2), **await used()})
            after = series[-1]
            wall = after["t"]
        finally:
            stop.set()
            for task in tasks:
                task.cancel()  # closes the connections: the server drops the jobs before their next chunk
            await asyncio.gather(*tasks, return_exceptions=True)

    resets = {
        key: [s["t"] for prev, s in zip(series, series[1:]) if s[key] < prev[key] - 1e-6] for key in WEIGHTS
    }
    delta = {key: after[key] - before[key] for key in WEIGHTS}
    in_window = {
        key: [r for r in runs if r["started"] >= t0 and r["ended"] <= t0 + wall] for key, runs in requests.items()
    }
    return {
        "before": before,
        "after": {k: after[k] for k in WEIGHTS},
        "delta": delta,
        "wall_s": wall,
        "series": series,
        "resets": resets,
        "requests": {
            key: {
                "completed_total": len(runs),
                "completed_in_window": len(in_window[key]),
                "synth_s_in_window": sum(float(r["synth_s"] or 0) for r in in_window[key]),
                "queue_s": stats([float(r["queue_s"] or 0) for r in runs]),
                "errors": errors[key][:10],
                "error_count": len(errors[key]),
            }
            for key, runs in requests.items()
        },
    }


def replay_decisions(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps between consecutive /health readings, and whether each went to the key with the least virtual time
    (used / weight; valid while neither key went idle, which its being kept busy ensures)."""
    out = []
    for prev, cur in zip(series, series[1:]):
        moved = {key: cur[key] - prev[key] for key in WEIGHTS if cur[key] - prev[key] > 1e-6}
        if not moved:
            continue
        virtual = {key: prev[key] / weight for key, weight in WEIGHTS.items()}
        if len(moved) > 1:
            out.append({"t": cur["t"], "keys": sorted(moved), "step_s": max(moved.values()), "consistent": None})
            continue
        (key, step), = moved.items()
        least = min(virtual.values())
        out.append(
            {
                "t": cur["t"],
                "keys": [key],
                "step_s": round(step, 3),
                "virtual_before": {k: round(v, 3) for k, v in virtual.items()},
                "consistent": virtual[key] <= least + 1e-3,
            }
        )
    return out


def bench_gpu_share(url: str, args: argparse.Namespace) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
        health = client.get("/health").json()
        weights = {key: state.get("weight") for key, state in health.get("inflight", {}).get("keys", {}).items()}
    raw = asyncio.run(_share(url, args))
    with httpx.Client(base_url=url, timeout=60) as client:
        drained = wait_idle(client)
    gold, silver = raw["delta"]["gold"], raw["delta"]["silver"]
    ratio = gold / silver if silver > 0 else float("inf")
    busy = (gold + silver) / raw["wall_s"] if raw["wall_s"] else None
    decisions = replay_decisions(raw["series"])
    steps = [d["step_s"] for d in decisions]
    max_step = max(steps, default=0.0)
    return {
        "goal": "gold/silver GPU time within 10% of 2.0 (1.8 to 2.2)",
        "met": abs(ratio - 2.0) <= 0.2,
        "ratio": ratio,
        "gold_gpu_s": gold,
        "silver_gpu_s": silver,
        "wall_s": raw["wall_s"],
        "gpu_thread_busy_fraction": busy,
        "cumulative_ratio_since_first_request": (
            raw["after"]["gold"] / raw["after"]["silver"] if raw["after"]["silver"] else None
        ),
        "granularity": {
            "what": "GPU time is charged per step (one text chunk); a window cuts steps at both ends, so the ratio of "
            "deltas is uncertain by about max_step_s * (1/gold + 1/silver), relative",
            "steps_seen": len(steps),
            "max_step_s": max_step,
            "median_step_s": statistics.median(steps) if steps else None,
            "relative_uncertainty": max_step * (1 / gold + 1 / silver) if gold > 0 and silver > 0 else None,
        },
        "scheduler_decisions": {
            "what": "each step seen in the /health series, checked against the rule: the key that stepped had the "
            "least used_gpu_s/weight before it (intervals where both keys advanced are ambiguous and skipped)",
            "checked": sum(d["consistent"] is not None for d in decisions),
            "consistent": sum(d["consistent"] is True for d in decisions),
            "inconsistent": [d for d in decisions if d["consistent"] is False],
            "steps": decisions,
        },
        "key_state_forgotten_during_window": raw["resets"],
        "weights_configured": WEIGHTS,
        "weights_seen_in_health_before": weights,
        "setup": {
            "in_flight_per_key": args.share_inflight,
            "max_chars_per_gen": args.share_max_chars or "engine default",
            "route": "/tts",
            "texts": MEDIUM_TEXTS,
            "warmup_s_before_first_reading": args.share_warmup,
            "measured_s": args.share_seconds,
            "how": "used_gpu_s of each key from GET /health at the start and the end of the window (both keys busy "
            "throughout), ratio of the deltas",
        },
        "drained_after": drained,
        "raw": raw,
    }


# ---------------------------------------------------------------------------------------------------------------
# 3. Service overhead against the engine called in-process


def bench_overhead(url: str, args: argparse.Namespace, threads: int | None) -> dict[str, Any]:
    from engines.base import BuiltinVoice, SynthesisOptions
    from server import build_engines
    from settings import load_settings
    from text import chunk_text, resolve_language

    overrides: dict[str, Any] = {"onnx_threads": threads} if threads else {}
    settings = load_settings(**overrides)
    engine = build_engines(settings)["kokoro"]
    load_started = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - load_started
    engine.warmup()
    voice_name = args.voice or settings.default_voice
    voice = next((v for v in engine.builtin_voices() if v.name == voice_name), None)
    if voice is None:
        raise RuntimeError(f"{voice_name!r} is not a built-in voice of the in-process engine; pass --voice")
    assert isinstance(voice, BuiltinVoice)
    caps = engine.caps
    text = CASES["sixty_words"] if args.overhead_text == "sixty_words" else CASES["one_sentence"]
    chunks = chunk_text(text, caps.first_chunk_chars or caps.max_chunk_chars, caps.max_chunk_chars, caps.max_sentences)
    options = SynthesisOptions(language=resolve_language("en"), params=dict(engine.params))

    def direct() -> dict[str, float]:
        started = time.perf_counter()
        samples = 0
        for chunk in chunks:
            handle = engine.prepare_voice(voice)
            for piece in engine.stream(chunk.text, handle, options):
                samples += len(piece)
        engine.release()
        return {"total_s": time.perf_counter() - started, "audio_s": samples / engine.sample_rate}

    body = {"text": text, "language": "en", **({"voice_id": args.voice} if args.voice else {})}

    def http(client: httpx.Client) -> dict[str, Any]:
        started = time.perf_counter()
        response = client.post("/tts", json=body)
        total = time.perf_counter() - started
        response.raise_for_status()
        return {
            "total_s": total,
            "audio_s": (len(response.content) - 44) / 2 / engine.sample_rate,
            "cache": response.headers.get("x-cache"),
            "server_timing": server_timing(response.headers.get("server-timing", "")),
        }

    direct_runs: list[dict[str, Any]] = []
    http_runs: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=url, timeout=600, headers={"X-Fairness-Key": "overhead"}) as client:
            wait_idle(client)
            server_threads = client.get("/health").json()["engines"]["kokoro"].get("threads")
            direct()
            http(client)  # one of each first: lazy set-up (G2P caches, allocator) is not what we measure
            for i in range(args.runs):
                order = (direct, http) if i % 2 == 0 else (http, direct)
                for fn in order:
                    time.sleep(args.pause)  # ONNX Runtime's worker threads spin briefly after a run
                    if fn is direct:
                        direct_runs.append(direct())
                    else:
                        http_runs.append(http(client))
    finally:
        engine.unload()

    direct_s = stats([r["total_s"] for r in direct_runs])
    http_s = stats([r["total_s"] for r in http_runs])
    server_total = stats([float(r["server_timing"].get("total_s", 0)) for r in http_runs])
    server_synth = stats([float(r["server_timing"].get("synth_s", 0)) for r in http_runs])
    synth_share = [
        float(r["server_timing"].get("synth_s", 0)) / float(r["server_timing"]["total_s"])
        for r in http_runs
        if r["server_timing"].get("total_s")
    ]
    percent = (http_s["median"] / direct_s["median"] - 1) * 100
    return {
        "goal": "/tts total (client side, median) at most 5% slower than the engine called directly (median)",
        "met": percent <= 5.0,
        "direct_s": direct_s,
        "http_tts_s": http_s,
        "overhead_percent": percent,
        "overhead_s": http_s["median"] - direct_s["median"],
        "server_timing_total_s": server_total,
        "server_timing_synth_s": server_synth,
        "server_timing_synth_share_of_total": stats(synth_share),
        "server_timing_note": "a lone request with no queue should show synth close to total; a share well below 1 "
        "means the server's `synth` (job.gpu_seconds) missed some GPU time, so compare totals, not synth",
        "audio_s": {
            "direct": direct_runs[0]["audio_s"] if direct_runs else None,
            "http": http_runs[0]["audio_s"] if http_runs else None,
        },
        "cache_hits_seen": sum(r["cache"] == "hit" for r in http_runs),
        "setup": {
            "text": text,
            "chunks": chunks,
            "voice": voice_name,
            "onnx_threads": {"in_process": engine.describe().get("threads"), "server": server_threads},
            "in_process_backend": engine.describe().get("backend"),
            "in_process_load_s": load_s,
            "runs_each": args.runs,
            "order": "alternating (direct, http), (http, direct), ...",
            "pause_between_runs_s": args.pause,
            "note": "The server is another process on the same machine (os.cpu_count() = %s): both ONNX sessions "
            "use the same number of intra-op threads on the same cores; only one of them runs at a time, but "
            "the idle one's process (and, on this machine, anything else running) shares the cores."
            % os.cpu_count(),
            "direct_measures": "engine.prepare_voice + engine.stream over text.chunk_text(...) chunks (G2P and "
            "inference; no PCM conversion, WAV, HTTP or scheduling)",
        },
        "runs": {"direct": direct_runs, "http": http_runs},
    }


# ---------------------------------------------------------------------------------------------------------------
# 4. Cache hits


def bench_cache(url: str, args: argparse.Namespace) -> dict[str, Any]:
    body = {"text": SHORT_TEXT, "language": "en", **({"voice_id": args.voice} if args.voice else {})}

    def tts(client: httpx.Client) -> tuple[float, str]:
        started = time.perf_counter()
        response = client.post("/tts", json=body)
        response.raise_for_status()
        return time.perf_counter() - started, response.headers.get("x-cache", "")

    def stream(client: httpx.Client) -> tuple[float, str]:
        started = time.perf_counter()
        with client.stream("POST", "/tts/stream", json=body) as response:
            response.raise_for_status()
            for _ in response.iter_raw():
                pass
        return time.perf_counter() - started, response.headers.get("x-cache", "")

    routes = {"/tts": tts, "/tts/stream": stream}
    out: dict[str, Any] = {"goal": None, "met": None, "goal_note": "informational: no goal was set for cache hits"}
    with httpx.Client(base_url=url, timeout=600, headers={"X-Fairness-Key": "cache"}) as client:
        first, first_cache = tts(client)  # the miss that fills the caches
        out["first_request"] = {"total_s": first, "cache": first_cache}
        latency: dict[str, Any] = {}
        for name, fn in routes.items():
            fn(client)
            runs = [fn(client) for _ in range(args.cache_runs)]
            latency[name] = {**stats([t for t, _ in runs]), "hits": sum(c == "hit" for _, c in runs)}
        out["latency_s"] = latency

        sequential: dict[str, Any] = {}
        for name, fn in routes.items():
            started = time.perf_counter()
            runs = [fn(client) for _ in range(args.cache_requests)]
            wall = time.perf_counter() - started
            sequential[name] = {
                "requests": len(runs),
                "wall_s": wall,
                "requests_per_s": len(runs) / wall,
                "hits": sum(c == "hit" for _, c in runs),
            }
        out["sequential"] = sequential

    concurrent: dict[str, Any] = {}
    for name, fn in routes.items():
        per_client = max(1, args.cache_requests // args.cache_clients)
        results: list[list[tuple[float, str]]] = [[] for _ in range(args.cache_clients)]
        barrier = threading.Barrier(args.cache_clients + 1)

        def client_loop(index: int) -> None:
            with httpx.Client(base_url=url, timeout=600, headers={"X-Fairness-Key": f"cache-{index}"}) as c:
                fn(c)  # connect first
                barrier.wait()
                results[index] = [fn(c) for _ in range(per_client)]

        threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(args.cache_clients)]
        for t in threads:
            t.start()
        barrier.wait(120)
        started = time.perf_counter()
        for t in threads:
            t.join(600)
        wall = time.perf_counter() - started
        flat = [r for rs in results for r in rs]
        concurrent[name] = {
            "clients": args.cache_clients,
            "requests": len(flat),
            "wall_s": wall,
            "requests_per_s": len(flat) / wall,
            "latency_s": stats([t for t, _ in flat]),
            "hits": sum(c == "hit" for _, c in flat),
        }
    out["concurrent"] = concurrent
    out["setup"] = {
        "text": SHORT_TEXT,
        "latency_runs": args.cache_runs,
        "throughput_requests": args.cache_requests,
        "note": "client and server share the same cores; latency is client-side, full body read",
    }
    return out


# ---------------------------------------------------------------------------------------------------------------


def section(report: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    sys.stderr.write(f"[fairness] {name} ...\n")
    started = time.perf_counter()
    load_before = load_average()
    try:
        result = fn()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one failed figure must not lose the others
        result = {"goal": None, "met": None, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        sys.stderr.write(f"[fairness] {name} failed: {exc}\n")
    result["elapsed_s"] = time.perf_counter() - started
    result["load_average_before_after"] = [load_before, load_average()]
    report["figures"][name] = result


def summary(figures: dict[str, Any]) -> dict[str, Any]:
    def get(name: str, *path: str) -> Any:
        value: Any = figures.get(name, {})
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    return {
        "ttfa_alone_s": get("ttfa", "ttfa_alone_s", "median"),
        "ttfa_under_load_s": get("ttfa", "ttfa_under_load_s", "median"),
        "ttfa_ratio": get("ttfa", "ratio"),
        "ttfa_met": get("ttfa", "met"),
        "ttfa_under_load_fresh_key_s": get("ttfa", "diagnostic_fresh_key", "ttfa_under_load_s", "median"),
        "gpu_share_ratio": get("gpu_share", "ratio"),
        "gpu_share_gold_s": get("gpu_share", "gold_gpu_s"),
        "gpu_share_silver_s": get("gpu_share", "silver_gpu_s"),
        "gpu_share_met": get("gpu_share", "met"),
        "overhead_direct_s": get("overhead", "direct_s", "median"),
        "overhead_http_s": get("overhead", "http_tts_s", "median"),
        "overhead_percent": get("overhead", "overhead_percent"),
        "overhead_met": get("overhead", "met"),
        "cache_tts_median_s": get("cache_hit", "latency_s", "/tts", "median"),
        "cache_tts_p95_s": get("cache_hit", "latency_s", "/tts", "p95"),
        "cache_stream_median_s": get("cache_hit", "latency_s", "/tts/stream", "median"),
        "cache_stream_p95_s": get("cache_hit", "latency_s", "/tts/stream", "p95"),
        "cache_sequential_rps": {k: v["requests_per_s"] for k, v in (get("cache_hit", "sequential") or {}).items()},
        "cache_concurrent_rps": {k: v["requests_per_s"] for k, v in (get("cache_hit", "concurrent") or {}).items()},
        "errors": {name: fig["error"] for name, fig in figures.items() if fig.get("error")},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    threads = args.onnx_threads or os.cpu_count() or 1
    server_env = {
        "POLYTTS_FAIRNESS_WEIGHTS": json.dumps(WEIGHTS),
        "POLYTTS_MAX_PENDING_PER_KEY": str(args.max_pending_per_key),
        "POLYTTS_ONNX_THREADS": str(threads),
    }
    report: dict[str, Any] = {
        "benchmark": "fairness",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(),
        "commit": commit(),
        "source_sha256": source_hashes(),
        "settings": {
            "flags": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "server_env": server_env if not args.url else "external server (--url): its own settings",
            "caches": "off for ttfa, gpu_share and overhead; on for cache_hit",
        },
        "figures": {},
    }
    selected = set(args.only or ["ttfa", "gpu_share", "overhead", "cache_hit"])
    with contextlib.ExitStack() as stack:
        report["host"]["load_average_start"] = load_average()
        if selected & {"ttfa", "gpu_share", "overhead"}:
            if args.url:
                url = args.url
            else:
                url = stack.enter_context(local_server(server_env))
            with httpx.Client(base_url=url, timeout=60) as client:
                health = client.get("/health").json()
            report["server"] = {
                "url": url,
                "engines": health.get("engines"),
                "device": health.get("device"),
                "limits": health.get("limits"),
            }
            server_threads = (health.get("engines") or {}).get("kokoro", {}).get("threads")
        if "ttfa" in selected:
            section(report, "ttfa", lambda: bench_ttfa(url, args))
        if "gpu_share" in selected:
            section(report, "gpu_share", lambda: bench_gpu_share(url, args))
        if "overhead" in selected:
            section(report, "overhead", lambda: bench_overhead(url, args, server_threads or threads))
        if not args.url:
            stack.close()  # the caches-off server is not needed any more
        if "cache_hit" in selected:
            cache_url = args.cache_url or args.url

            def cache_figure() -> dict[str, Any]:
                if cache_url:
                    return {**bench_cache(cache_url, args), "server_url": cache_url}
                with local_server(server_env, caches=True) as local:
                    return {**bench_cache(local, args), "server_url": local, "server_started_with": "caches on (default sizes)"}

            section(report, "cache_hit", cache_figure)
    report["host"]["load_average_end"] = load_average()
    report["summary"] = summary(report["figures"])
    report["notes"] = [
        "The server and this client run on the same machine and share its cores; the in-process engine of "
        "`overhead` runs in this client process.",
        "Other processes on the machine (load_average_* fields) add noise to every timing.",
    ]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches off and gold/silver weights; default: start one")
    parser.add_argument("--cache-url", help="a running server with caches on, for cache_hit; default: --url, else start one")
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--runs", type=int, default=3, help="N for medians of ttfa and overhead (default 3)")
    parser.add_argument("--load-delay", type=float, default=1.0, help="s after the long request's first audio before a short one")
    parser.add_argument("--share-seconds", type=float, default=60.0, help="measured window of gpu_share (default 60)")
    parser.add_argument("--share-warmup", type=float, default=5.0, help="s of load before the window starts (default 5)")
    parser.add_argument("--share-inflight", type=int, default=2, help="requests each key keeps in flight (default 2)")
    parser.add_argument(
        "--share-max-chars", type=int, default=0, help="gpu_share requests' max_chars_per_gen (default 0: the engine's caps)"
    )
    parser.add_argument("--overhead-text", choices=["one_sentence", "sixty_words"], default="sixty_words")
    parser.add_argument("--pause", type=float, default=0.5, help="s between overhead runs (default 0.5)")
    parser.add_argument("--cache-runs", type=int, default=50, help="cache hits per route for latency (default 50)")
    parser.add_argument("--cache-requests", type=int, default=200, help="cache hits per throughput test (default 200)")
    parser.add_argument("--cache-clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument(
        "--onnx-threads", type=int, default=0, help="ONNX threads of the server and in-process engine (default: cpus)"
    )
    parser.add_argument("--max-pending-per-key", type=int, default=64)
    parser.add_argument(
        "--only", action="append", choices=["ttfa", "gpu_share", "overhead", "cache_hit"], help="run only these (repeatable)"
    )
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    _stop_on_sigterm()
    try:
        report = run(args)
    finally:
        left = _reap_children()
        if left:
            sys.stderr.write(f"[fairness] killed leftover child processes {left}\n")
    out = args.out or ROOT / "bench" / "results" / f"fairness-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    sys.stdout.write(json.dumps(report["summary"], indent=2) + "\n")
    sys.stdout.write(f"wrote {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
