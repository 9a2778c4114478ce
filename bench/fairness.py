"""Weighted fair sharing of the GPU thread between busy keys, over HTTP.

    python -m bench.fairness                 # starts its own server (caches off, weights gold 2 / silver 1)
    python -m bench.fairness --url URL       # a running server started with caches off and
                                             # POLYTTS_FAIRNESS_WEIGHTS='{"gold": 2, "silver": 1}'

Keys "gold" (weight 2) and "silver" (weight 1) each keep `--inflight` whole-file `/tts` requests going; the split of
GPU time is read from `/health` (`inflight.keys.<key>.used_gpu_s`) at the start and the end of a window in which both
stay busy. Goal: gold/silver within 10 % of 2.0. Each step seen in the `/health` series is also checked against the
rule (the key that stepped had the least used time / weight before it).

Writes `bench/results/fairness-<UTC time>.json` (or `--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx

from bench.common import figure_main, server_timing, stats, wait_idle

WEIGHTS = {"gold": 2.0, "silver": 1.0}
MEDIUM_TEXTS = [
    "The library opens at nine in the morning and closes at six in the evening. Visitors can borrow up to five "
    "books at a time, and returns are accepted at the front desk or through the slot by the main door.",
    "Our train leaves the central station at half past seven. Please arrive a few minutes early, bring your "
    "ticket, and keep your luggage with you, because the platform is crowded during the morning rush.",
    "Fresh bread is baked every day before sunrise. The bakers mix the flour, water and salt by hand, let the "
    "dough rest for several hours, and shape each loaf carefully before it goes into the hot stone oven.",
]


async def _busy_keys(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Keep both keys busy; read their used GPU time every half second through the measured window."""
    finished: dict[str, list[dict[str, Any]]] = {key: [] for key in WEIGHTS}
    errors: dict[str, list[str]] = {key: [] for key in WEIGHTS}
    stop = asyncio.Event()

    async def worker(client: httpx.AsyncClient, key: str, index: int) -> None:
        n = index
        while not stop.is_set():
            body: dict[str, Any] = {"text": MEDIUM_TEXTS[n % len(MEDIUM_TEXTS)], "language": "en"}
            body |= {"voice_id": args.voice} if args.voice else {}
            n += 1
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
            finished[key].append({"started": started, "ended": time.perf_counter(), "queue_s": timing.get("queue_s")})

    series: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=4 * args.inflight * len(WEIGHTS))
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def used() -> dict[str, float]:
            keys = (await client.get("/health")).json().get("inflight", {}).get("keys", {})
            return {key: float(keys[key]["used_gpu_s"]) if key in keys else 0.0 for key in WEIGHTS}

        tasks = [asyncio.create_task(worker(client, key, i)) for key in WEIGHTS for i in range(args.inflight)]
        try:
            await asyncio.sleep(args.warmup)
            t0 = time.perf_counter()
            series.append({"t": 0.0, **await used()})
            while (elapsed := time.perf_counter() - t0) < args.seconds:
                await asyncio.sleep(min(0.5, args.seconds - elapsed))
                series.append({"t": round(time.perf_counter() - t0, 2), **await used()})
        finally:
            stop.set()
            for task in tasks:
                task.cancel()  # closes the connections: the server drops the jobs before their next step
            await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "series": series,
        "requests": {
            key: {
                "completed": len(runs),
                "queue_s": stats([float(r["queue_s"] or 0) for r in runs]),
                "errors": errors[key][:10],
                "error_count": len(errors[key]),
            }
            for key, runs in finished.items()
        },
    }


def check_steps(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps between consecutive readings, and whether each went to the key with the least used time / weight."""
    out = []
    for prev, cur in zip(series, series[1:]):
        moved = {key: cur[key] - prev[key] for key in WEIGHTS if cur[key] - prev[key] > 1e-6}
        if len(moved) != 1:
            continue  # none, or both keys advanced between two readings: ambiguous
        ((key, step),) = moved.items()
        virtual = {k: prev[k] / weight for k, weight in WEIGHTS.items()}
        out.append(
            {
                "t": cur["t"],
                "key": key,
                "step_s": round(step, 3),
                "consistent": virtual[key] <= min(virtual.values()) + 1e-3,
            }
        )
    return out


def gpu_share(url: str, args: argparse.Namespace) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
    raw = asyncio.run(_busy_keys(url, args))
    with httpx.Client(base_url=url, timeout=60) as client:
        drained = wait_idle(client)
    first, last = raw["series"][0], raw["series"][-1]
    gold, silver = last["gold"] - first["gold"], last["silver"] - first["silver"]
    ratio = gold / silver if silver > 0 else float("inf")
    steps = check_steps(raw["series"])
    largest = max((s["step_s"] for s in steps), default=0.0)
    return {
        "goal": "gold/silver GPU time within 10% of 2.0 (1.8 to 2.2)",
        "met": abs(ratio - 2.0) <= 0.2,
        "ratio": ratio,
        "gold_gpu_s": gold,
        "silver_gpu_s": silver,
        "wall_s": last["t"],
        "gpu_thread_busy_fraction": (gold + silver) / last["t"] if last["t"] else None,
        "granularity": {
            "what": "GPU time is charged per step; a window cuts steps at both ends, so the ratio is uncertain by "
            "about max_step_s * (1/gold + 1/silver), relative",
            "max_step_s": largest,
            "median_step_s": statistics.median([s["step_s"] for s in steps]) if steps else None,
            "relative_uncertainty": largest * (1 / gold + 1 / silver) if gold > 0 and silver > 0 else None,
        },
        "steps_checked": len(steps),
        "steps_consistent": sum(s["consistent"] for s in steps),
        "drained_after": drained,
        "setup": {
            "in_flight_per_key": args.inflight,
            "warmup_s": args.warmup,
            "measured_s": args.seconds,
            "route": "/tts",
        },
        "raw": raw,
    }


def server_env(args: argparse.Namespace) -> dict[str, str]:
    """The weights measured, and room for every request the keys keep in flight."""
    return {"POLYTTS_FAIRNESS_WEIGHTS": json.dumps(WEIGHTS), "POLYTTS_MAX_PENDING_PER_KEY": str(4 * args.inflight)}


def summary(share: dict[str, Any]) -> str:
    return (
        f"gpu_share: gold {share['gold_gpu_s']:.1f}s : silver {share['silver_gpu_s']:.1f}s = {share['ratio']:.2f} "
        f"(goal 2.0 +/- 10%: {'met' if share['met'] else 'not met'}); steps consistent with the rule: "
        f"{share['steps_consistent']}/{share['steps_checked']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches off and gold/silver weights; default: start one")
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window (default 60)")
    parser.add_argument("--warmup", type=float, default=5.0, help="s of load before the window starts (default 5)")
    parser.add_argument("--inflight", type=int, default=2, help="requests each key keeps in flight (default 2)")
    return figure_main("fairness", parser, gpu_share, summary, server_env)


if __name__ == "__main__":
    sys.exit(main())
