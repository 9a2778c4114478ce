"""Cache hits: latency of repeated `/tts` and `/tts/stream` hits, and throughput of sequential and concurrent hits.

    python -m bench.cache_hits               # starts its own server with caches on (default sizes)
    python -m bench.cache_hits --url URL     # a running server with caches on

Informational (no goal). Writes `bench/results/cache_hits-<UTC time>.json` (or `--out`).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.common import SHORT_TEXT, figure_main, stats

Hit = Callable[[httpx.Client], tuple[float, str]]


def routes(body: dict[str, Any]) -> dict[str, Hit]:
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

    return {"/tts": tts, "/tts/stream": stream}


def concurrent(url: str, hit: Hit, clients: int, requests: int) -> dict[str, Any]:
    per_client = max(1, requests // clients)
    results: list[list[tuple[float, str]]] = [[] for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def loop(index: int) -> None:
        with httpx.Client(base_url=url, timeout=600, headers={"X-Fairness-Key": f"cache-{index}"}) as client:
            hit(client)  # connect first
            barrier.wait()
            results[index] = [hit(client) for _ in range(per_client)]

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait(120)
    started = time.perf_counter()
    for thread in threads:
        thread.join(600)
    wall = time.perf_counter() - started
    flat = [r for rs in results for r in rs]
    return {
        "clients": clients,
        "requests": len(flat),
        "requests_per_s": len(flat) / wall,
        "latency_s": stats([t for t, _ in flat]),
        "hits": sum(c == "hit" for _, c in flat),
    }


def cache_hits(url: str, args: argparse.Namespace) -> dict[str, Any]:
    body = {"text": SHORT_TEXT, "language": "en", **({"voice_id": args.voice} if args.voice else {})}
    hits = routes(body)
    out: dict[str, Any] = {"goal": None, "met": None}
    with httpx.Client(base_url=url, timeout=600, headers={"X-Fairness-Key": "cache"}) as client:
        first, cache = hits["/tts"](client)  # the miss that fills the caches
        out["first_request"] = {"total_s": first, "cache": cache}
        latency, sequential = {}, {}
        for name, hit in hits.items():
            runs = [hit(client) for _ in range(args.runs)]
            latency[name] = {**stats([t for t, _ in runs]), "hits": sum(c == "hit" for _, c in runs)}
            started = time.perf_counter()
            runs = [hit(client) for _ in range(args.requests)]
            sequential[name] = {"requests": len(runs), "requests_per_s": len(runs) / (time.perf_counter() - started)}
    out["latency_s"], out["sequential"] = latency, sequential
    out["concurrent"] = {name: concurrent(url, hit, args.clients, args.requests) for name, hit in hits.items()}
    out["setup"] = {
        "text": SHORT_TEXT,
        "note": "client and server share the machine; latency is client side, body read",
    }
    return out


def summary(fig: dict[str, Any]) -> str:
    return "\n".join(
        f"{name}: hit latency {fig['latency_s'][name]['median'] * 1000:.1f} ms (median); "
        f"{fig['sequential'][name]['requests_per_s']:.0f} req/s sequential, "
        f"{fig['concurrent'][name]['requests_per_s']:.0f} req/s with {fig['concurrent'][name]['clients']} clients"
        for name in fig["latency_s"]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches on; default: start one")
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--runs", type=int, default=50, help="hits per route for latency (default 50)")
    parser.add_argument("--requests", type=int, default=200, help="hits per throughput test (default 200)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    return figure_main("cache_hits", parser, cache_hits, summary, caches=True)


if __name__ == "__main__":
    sys.exit(main())
