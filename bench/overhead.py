"""Service overhead: `/tts` over HTTP against the same Kokoro engine called directly in this process.

    python -m bench.overhead                 # starts its own server (caches off)
    python -m bench.overhead --url URL       # a running server with caches off

Both synthesize the same text cut into the same chunks, alternating (direct, http), (http, direct), ... Goal: the
service at most 5 % slower (medians). Writes `bench/results/overhead-<UTC time>.json` (or `--out`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import httpx

from bench.common import (
    SHORT_TEXT,
    SIXTY_WORDS,
    figure_main,
    in_process_engine,
    server_timing,
    stats,
    wait_idle,
)


def overhead(url: str, args: argparse.Namespace) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60) as probe:
        server_threads = probe.get("/health").json()["engines"]["kokoro"].get("threads")
    text = SIXTY_WORDS if args.text == "sixty_words" else SHORT_TEXT
    body = {"text": text, "language": "en", **({"voice_id": args.voice} if args.voice else {})}
    overrides = {"onnx_threads": server_threads} if server_threads else {}
    with in_process_engine(args.voice, **overrides) as engine:

        def direct() -> dict[str, Any]:
            started = time.perf_counter()
            samples = sum(len(piece) for piece in engine.speak(text))
            return {"total_s": time.perf_counter() - started, "audio_s": samples / engine.sample_rate}

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

        runs: dict[str, list[dict[str, Any]]] = {"direct": [], "http": []}
        with httpx.Client(base_url=url, timeout=600, headers={"X-Fairness-Key": "overhead"}) as client:
            wait_idle(client)
            direct()
            http(client)  # one of each first: lazy set-up (G2P caches, allocator) is not what we measure
            for i in range(args.runs):
                for name in ("direct", "http") if i % 2 == 0 else ("http", "direct"):
                    time.sleep(args.pause)  # ONNX Runtime's worker threads spin briefly after a run
                    runs[name].append(direct() if name == "direct" else http(client))
    direct_s, http_s = stats([r["total_s"] for r in runs["direct"]]), stats([r["total_s"] for r in runs["http"]])
    percent = (http_s["median"] / direct_s["median"] - 1) * 100
    return {
        "goal": "/tts total (client side, median) at most 5% slower than the engine called directly (median)",
        "met": percent <= 5.0,
        "direct_s": direct_s,
        "http_tts_s": http_s,
        "overhead_percent": percent,
        "server_timing_synth_s": stats([float(r["server_timing"].get("synth_s", 0)) for r in runs["http"]]),
        "cache_hits_seen": sum(r["cache"] == "hit" for r in runs["http"]),
        "setup": {
            "text": text,
            "voice": args.voice,
            "onnx_threads": {"server": server_threads},
            "runs_each": args.runs,
            "note": f"the server is another process on the same machine (os.cpu_count() = {os.cpu_count()}); only "
            "one of the two synthesizes at a time; both chunk and join the text the same way",
        },
        "runs": runs,
    }


def summary(fig: dict[str, Any]) -> str:
    return (
        f"overhead: /tts {fig['http_tts_s']['median']:.3f}s vs in-process {fig['direct_s']['median']:.3f}s "
        f"({fig['overhead_percent']:+.1f} %; goal at most 5 %: {'met' if fig['met'] else 'not met'})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches off; default: start one")
    parser.add_argument("--voice", help="a built-in voice; default: the server's default voice")
    parser.add_argument("--runs", type=int, default=3, help="runs of each, for the medians (default 3)")
    parser.add_argument("--text", choices=["one_sentence", "sixty_words"], default="sixty_words")
    parser.add_argument("--pause", type=float, default=0.5, help="s between runs (default 0.5)")
    return figure_main("overhead", parser, overhead, summary)


if __name__ == "__main__":
    sys.exit(main())
