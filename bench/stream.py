"""Streaming latency benchmark: time to first audio, total time and real-time factor over HTTP.

    python bench/stream.py                   # starts server.py on a free port with caches off, then stops it
    python bench/stream.py --url URL         # against a running server (start it with POLYTTS_*_CACHE_BYTES=0)

Writes one JSON file (default `bench/results/stream-<UTC time>.json`) to compare run to run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "one_sentence": "The quick brown fox jumps over the lazy dog near the riverbank.",
    "sixty_words": (
        "Streaming speech lets an application start playing audio long before the whole answer is ready. "
        "The service splits the text into sentences, keeps the first piece short, and sends each piece as soon "
        "as the model produces it. Listeners hear the first words almost at once, while the rest of the "
        "paragraph is still being generated in the background on the same machine."
    ),
}


@contextmanager
def local_server(extra_env: Mapping[str, str] | None = None, caches: bool = False) -> Iterator[str]:
    """server.py on a free port in a temporary folder; caches off unless asked (their default sizes then)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            **(extra_env or {}),
            "POLYTTS_PORT": str(port),
            "POLYTTS_VOICES_DIR": f"{tmp}/voices",
            "POLYTTS_CACHE_DIR": f"{tmp}/cache",
            "POLYTTS_LOG_LEVEL": "warning",
        }
        if not caches:
            env |= {"POLYTTS_WAV_CACHE_BYTES": "0", "POLYTTS_PCM_CACHE_BYTES": "0"}
        proc = subprocess.Popen([sys.executable, "server.py"], cwd=ROOT, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def wait_ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s")


def measure(client: httpx.Client, text: str, voice: str | None) -> dict[str, float | str]:
    body = {"text": text, "language": "en", **({"voice_id": voice} if voice else {})}
    started = time.perf_counter()
    first = None
    size = 0
    with client.stream("POST", "/tts/stream", json=body) as response:
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


def summarize(runs: list[dict[str, float | str]]) -> dict[str, object]:
    out: dict[str, object] = {"runs": runs}
    for key in ("ttfa_s", "total_s", "audio_s", "rtf"):
        values = [float(r[key]) for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    out["cache_hits"] = sum(r["cache"] == "hit" for r in runs)
    return out


def run(url: str, runs: int, voice: str | None) -> dict[str, object]:
    with httpx.Client(base_url=url, timeout=600) as client:
        health = client.get("/health").json()
        measure(client, "Warm up.", voice)  # the first call pays for lazy set-up; not what we measure
        results = {name: summarize([measure(client, text, voice) for _ in range(runs)]) for name, text in CASES.items()}
    return {
        "benchmark": "stream",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "server": {"url": url, "engines": health.get("engines"), "device": health.get("device")},
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "runs_per_case": runs,
        "words": {name: len(text.split()) for name, text in CASES.items()},
        "results": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    if args.url:
        report = run(args.url, args.runs, args.voice)
    else:
        with local_server() as url:
            report = run(url, args.runs, args.voice)
    out = args.out or ROOT / "bench" / "results" / f"stream-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name, result in report["results"].items():  # type: ignore[union-attr]
        ttfa, total, rtf = (result[k]["median"] for k in ("ttfa_s", "total_s", "rtf"))
        sys.stdout.write(f"{name}: ttfa {ttfa:.3f}s  total {total:.3f}s  rtf {rtf:.3f}  (median of {args.runs})\n")
    sys.stdout.write(f"wrote {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
