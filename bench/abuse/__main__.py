"""Hostile clients and damaged disks: replay the adversarial probes and check each answer.

    python -m bench.abuse                        # servers of its own (see below); about 15 minutes on 2 cores
    python -m bench.abuse --url URL [--api-key KEY] [--cache-dir DIR] [--pid PID]   # the probes that apply

Prints one line per probe: what the server answered, how long it took, and the server process's memory over the
probe (`rss`: VmRSS after minus before; `peak`: its VmHWM, reset before the probe, minus VmRSS before), then whether
the expectation held. Exits 1 when any did not, so it also serves as a check. Writes
`bench/results/abuse-<UTC time>.json` (or `--out`).

Its own servers: `plain` (no API keys, PCM cache on, in-memory cache off so that repeats read the disk, logging at info;
also the text amplification, small-item and abandoned-work probes), `keyed` (API keys on, started on a voices folder
holding a pack whose meta.json is damaged; also the refusal probes), `one_slot` (POLYTTS_MAX_INFLIGHT=1, so that one
held stream makes every other request a rejection) and `hostage` (short live and reader idle limits: idle live sessions,
readers that never read, Retry-After obeyed by a crowd, fresh and after as many clients refused and gone); the `signals`
probes start processes of their own (Ctrl+C under run.sh, repeated SIGTERM, invalid settings at each step). Against
`--url`, probes that need a server's files or configuration are skipped with the reason: cache entries need
`--cache-dir` (and a server with POLYTTS_MEMORY_CACHE_BYTES=0), bodies refused before authentication need `--api-key`
(keys on), random fairness keys need keys off and POLYTTS_MAX_INFLIGHT=1, a damaged voices folder needs a server of its
own; memory is read from /proc when the server runs on this machine (its pid from `--pid` or `/health`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from bench.abuse import abandoned, hostage, refusals, signals, small_items, text_work
from bench.abuse.admission import random_keys
from bench.abuse.inputs import damaged_voices, keyed_probes, plain_probes
from bench.abuse.probing import API_KEY, SENTENCE, Outcome, Target, line, no_tracebacks
from bench.common import local_server, new_report, run_main


def own_servers() -> list[Target]:
    targets = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        # INFO: the ElevenLabs abandonment probes read each request's outcome line.
        env = {"POLYTTS_MEMORY_CACHE_BYTES": "0", "POLYTTS_LOG_LEVEL": "info"}
        with local_server(env, caches=True, log_path=logs / "plain.log") as server:
            plain = Target("plain", server.url, server.pid, cache_dir=server.cache_dir, log_path=server.log_path)
            text_work.probes(plain, own=True)
            small_items.probes(plain, own=True)
            abandoned.probes(plain, own=True)
            plain_probes(plain, own=True)  # last: it ends by reading the log for tracebacks
            targets.append(plain)
        voices = logs / "voices"
        good, damaged = damaged_voices(voices)
        # INFO: the refusal probes read the one line each refused request logs.
        env = {
            "POLYTTS_API_KEYS": json.dumps({API_KEY: "prober"}),
            "POLYTTS_VOICES_DIR": str(voices),
            "POLYTTS_LOG_LEVEL": "info",
        }
        started = time.perf_counter()
        with local_server(env, log_path=logs / "keyed.log") as server:
            keyed = Target("keyed", server.url, server.pid, API_KEY, log_path=server.log_path)
            keyed_probes(keyed, (good, damaged, time.perf_counter() - started))
            refusals.probes(keyed, own=True)
            keyed.probe("no traceback logged", lambda: no_tracebacks(keyed))
            targets.append(keyed)
        env = {"POLYTTS_MAX_INFLIGHT": "1", "POLYTTS_SLOW_READER_LAG_S": "600", "POLYTTS_READER_IDLE_LIMIT_S": "600"}
        with local_server(env, log_path=logs / "one_slot.log") as server:
            one_slot = Target("one_slot", server.url, server.pid, log_path=server.log_path)
            with one_slot.client() as client:  # the engine's first run allocates its arenas: not the probe's memory
                client.post("/tts", json={"text": SENTENCE}).raise_for_status()
            one_slot.probe("2,000 rejected requests with random keys", lambda: random_keys(one_slot))
            one_slot.probe("no traceback logged", lambda: no_tracebacks(one_slot))
            targets.append(one_slot)
        with local_server({**hostage.SERVER_ENV, "POLYTTS_LOG_LEVEL": "info"}, log_path=logs / "hostage.log") as server:
            held = Target("hostage", server.url, server.pid, log_path=server.log_path)
            hostage.probes(held, own=True)
            abandoned.unread_probes(held, own=True)
            held.probe("no traceback logged", lambda: no_tracebacks(held))
            targets.append(held)
        stops = Target("signals", "-", None)
        signals.probes(stops, own=True)
        targets.append(stops)
    return targets


def given_server(args: argparse.Namespace) -> Target:
    with httpx.Client(
        base_url=args.url, timeout=30, headers={"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    ) as client:
        health = client.get("/health").json()
    pid = args.pid or health.get("pid")
    target = Target(
        "given", args.url, pid if pid and Path(f"/proc/{pid}/status").exists() else None, args.api_key, args.cache_dir
    )
    plain_probes(target, own=False)
    text_work.probes(target, own=False)
    small_items.probes(target, own=False)
    abandoned.probes(target, own=False)
    keyed_probes(target, None)
    refusals.probes(target, own=False)
    hostage.probes(target, own=False)
    abandoned.unread_probes(target, own=False)
    one_slot = health.get("limits", {}).get("max_inflight") == 1 and not args.api_key
    target.probe(
        "2,000 rejected requests with random keys",
        lambda: random_keys(target),
        None if one_slot else "needs a server without keys and with POLYTTS_MAX_INFLIGHT=1",
    )
    return target


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = new_report("abuse", args)
    targets = [given_server(args)] if args.url else own_servers()
    outcomes = [outcome for target in targets for outcome in target.outcomes]
    report["figures"]["probes"] = [asdict(outcome) for outcome in outcomes]
    report["failed"] = [f"{o.server}: {o.probe}" for o in outcomes if o.ok is False]
    return report


def summary(report: dict[str, Any]) -> str:
    outcomes = [Outcome(**probe) for probe in report["figures"]["probes"]]
    counts = {verdict: sum(o.ok is verdict for o in outcomes) for verdict in (True, False, None)}
    tail = f"{counts[True]} probes held, {counts[False]} failed, {counts[None]} skipped"
    return "\n".join([*map(line, outcomes), tail])


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.abuse", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="a running server; default: start servers of its own")
    parser.add_argument("--api-key", help="the running server's API key, if it has keys")
    parser.add_argument("--cache-dir", type=Path, help="the running server's POLYTTS_CACHE_DIR (for the cache probes)")
    parser.add_argument("--pid", type=int, help="the running server's pid (default: from /health)")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    return run_main("abuse", lambda: run(args), args.out, summary)


if __name__ == "__main__":
    sys.exit(main())
