"""A concurrency sweep: 1, 2, 4 and 8 clients starting streams at once and staggered, anonymous and keyed, on one
server: this benchmark's own, or a peer's with `--url` (the same script measures both).

    python -m bench.sweep                                  # starts its own server (caches off), ~10 minutes
    python -m bench.sweep --url http://peer:8000           # a running server with caches off (its own limits apply)
    python -m bench.sweep --clients 1,2 --arrivals at_once --modes keyed --runs 1   # a quick look

Every client streams the same paragraph (`PARAGRAPH`, about 12 s of audio) through `/tts/stream` and plays it in
real time from its first byte, pausing when it runs dry (`bench.concurrency.listen`). Arrivals: `at_once` (all at
the same instant) or `staggered` (one every `--stagger` s). Modes: `anonymous` (no key: one queue) and `keyed`
(`X-Fairness-Key` per client). Each case, over `--runs` rounds:

- `admitted` (and the refusals by code): how many streams the node took on;
- first audio p50 and p95 of the admitted streams;
- underrun seconds: in all, and the worst stream's;
- real-time factor of the admitted: each stream's time from its first audio to its last byte over its audio seconds
  (below 1: it arrived faster than it plays), p50 and worst.

There is no goal to meet: the sweep describes a node. Writes `bench/results/sweep-<UTC time>.json` (or `--out`) and
prints one Markdown table per mode. The host's processor flags and load average are in the report (`host`, and each
case's `load_average_before_after`): on a machine shared with other work the timings move with its load.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import int_list, local_server, new_report, run_main, section, server_view, wait_idle
from bench.concurrency import PARAGRAPH, Listening, listen, public

ARRIVALS = ("at_once", "staggered")
MODES = ("anonymous", "keyed")


def arrive(url: str, clients: int, stagger_s: float, keyed: bool, voice: str | None, rnd: int) -> list[Listening]:
    """`clients` streams of the paragraph, started together (`stagger_s` 0) or one every `stagger_s`; waits for all."""
    heard = [Listening() for _ in range(clients)]
    barrier = threading.Barrier(clients) if stagger_s == 0 else None

    def one(index: int) -> None:
        if barrier is None:
            time.sleep(index * stagger_s)
        heard[index] = listen(url, PARAGRAPH, f"sweep-{rnd}-{index}" if keyed else None, barrier, voice)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    return heard


def percentile(values: list[float], share: float) -> float | None:
    """The `share` percentile (nearest rank) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def real_time_factor(heard: Listening) -> float | None:
    """Time from the stream's first audio to its last byte over its audio seconds."""
    playback = heard.playback
    if playback is None or playback.first_audio is None or heard.total_s is None or not playback.audio_s:
        return None
    return (playback.began + heard.total_s - playback.first_audio) / playback.audio_s


def case(url: str, args: argparse.Namespace, clients: int, arrival: str, keyed: bool) -> dict[str, Any]:
    rounds: list[list[Listening]] = []
    for rnd in range(args.runs):
        with httpx.Client(base_url=url, timeout=60) as client:
            wait_idle(client)
        stagger = args.stagger if arrival == "staggered" else 0.0
        rounds.append(arrive(url, clients, stagger, keyed, args.voice, rnd))
    heard = [h for r in rounds for h in r]
    admitted = [h for h in heard if h.status == 200]
    ttfas = [h.ttfa_s for h in admitted if h.ttfa_s is not None]
    factors = [f for h in admitted if (f := real_time_factor(h)) is not None]
    return {
        "clients": clients,
        "arrival": arrival,
        "streams": len(heard),
        "admitted_per_round": [sum(h.status == 200 for h in r) for r in rounds],
        "refused": dict(collections.Counter(h.code or str(h.status) for h in heard if h.status != 200)),
        "ttfa_p50_s": percentile(ttfas, 0.5),
        "ttfa_p95_s": percentile(ttfas, 0.95),
        "underrun_s": sum(h.underrun_s for h in admitted),
        "max_underrun_s": max((h.underrun_s for h in admitted), default=0.0),
        "rtf_p50": statistics.median(factors) if factors else None,
        "rtf_max": max(factors, default=None),
        "rounds": [[public(h) for h in r] for r in rounds],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = new_report("sweep", args)
    with contextlib.ExitStack() as stack:
        # Every client of this benchmark has the same address: the per-address share would hide the scheduler.
        url = args.url or stack.enter_context(local_server({"POLYTTS_MAX_CLIENT_SHARE": "1"})).url
        report["server"] = server_view(url)
        listen(url, PARAGRAPH, None, voice=args.voice)  # warm: lazy set-up is not what is measured
        for mode in args.modes:
            for arrival in args.arrivals:
                for clients in args.clients:
                    section(
                        report,
                        f"{mode}/{arrival}/{clients}",
                        lambda: case(url, args, clients, arrival, mode == "keyed"),
                    )
    return report


def table(report: dict[str, Any]) -> str:
    """One Markdown table per mode: a row per arrival and client count."""

    def s(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "-"

    host = report["host"]
    lines = [f"{host.get('cpu_model')}, {host.get('cpus')} CPUs, flags {' '.join(host.get('cpu_flags', []))}"]
    for mode in MODES:
        rows = [(name, fig) for name, fig in report["figures"].items() if name.startswith(mode + "/")]
        if not rows:
            continue
        lines += [
            f"\n{mode} clients",
            "",
            "| arrival | clients | admitted | first audio p50 / p95 (s) | underrun (s), worst | RTF p50 / worst "
            "| refused | load avg |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, fig in rows:
            if "error" in fig:
                lines.append(f"| {name} | failed: {fig['error']} | | | | | | |")
                continue
            load = (fig.get("load_average_before_after") or [None])[0]
            lines.append(
                f"| {fig['arrival']} | {fig['clients']} | {fig['admitted_per_round']} | {s(fig['ttfa_p50_s'])} / "
                f"{s(fig['ttfa_p95_s'])} | {fig['underrun_s']:.2f}, {fig['max_underrun_s']:.2f} | {s(fig['rtf_p50'])} / "
                f"{s(fig['rtf_max'])} | {fig['refused'] or '-'} | {load[0] if load else '-'} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches off (a peer); default: start one")
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--runs", type=int, default=1, help="rounds of each case (default 1)")
    parser.add_argument(
        "--clients", type=int_list, default=[1, 2, 4, 8], help="client counts, comma-separated (default 1,2,4,8)"
    )
    parser.add_argument(
        "--arrivals",
        type=lambda v: v.split(","),
        default=list(ARRIVALS),
        help="at_once,staggered (default both)",
    )
    parser.add_argument("--stagger", type=float, default=1.0, help="s between staggered arrivals (default 1)")
    parser.add_argument(
        "--modes", type=lambda v: v.split(","), default=list(MODES), help="anonymous,keyed (default both)"
    )
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    return run_main("sweep", lambda: run(args), args.out, table)


if __name__ == "__main__":
    sys.exit(main())
