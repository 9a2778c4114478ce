"""Run every benchmark and combine their results into one JSON file.

    python -m bench.run_all                                  # each benchmark starts its own server
    python -m bench.run_all --skip cache_hits --skip overhead
    python -m bench.run_all --args concurrency="--runs 3 --burst 20" --args fairness="--seconds 30"
    python -m bench.run_all --url URL                        # all against one running server (see each script)

Each benchmark runs as a subprocess, `python -m bench.<name>` with this same Python from the repository root, and
writes its own JSON (`--out`, into `bench/results/`); this script reads them back and writes
`bench/results/all-<UTC time>.json` holding all of them, with each one's exit status and duration. It exits non-zero
when any benchmark failed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, new_report, stop_on_sigterm, write_report

BENCHMARKS = (
    "stream",
    "concurrency",
    "contention",
    "sweep",
    "fairness",
    "overhead",
    "cache_hits",
    "encoding",
    "live",
    "fronts",
    "intelligibility",
    "timings",
    "languages",
    "abuse",
    "jobs",
    "lexicon",
)
"""The benchmarks, in the order they run: each is the module `bench.<name>`."""


def run_one(name: str, out: Path, extra: list[str], timeout: float | None) -> dict[str, Any]:
    command = [sys.executable, "-m", f"bench.{name}", "--out", str(out), *extra]
    sys.stderr.write(f"[run_all] {name}: {shlex.join(command)}\n")
    started = time.perf_counter()
    entry: dict[str, Any] = {"command": command, "out": str(out)}
    proc = subprocess.Popen(command, cwd=ROOT)
    try:
        entry["returncode"] = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        entry["returncode"] = None
        entry["error"] = f"timed out after {timeout}s"
    finally:
        if proc.poll() is None:  # timed out or interrupted: the benchmark stops its own servers on SIGTERM
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    entry["elapsed_s"] = time.perf_counter() - started
    try:
        entry["result"] = json.loads(out.read_text())
    except (OSError, ValueError) as exc:
        entry["result"] = None
        entry.setdefault("error", f"no result read from {out}: {exc}")
    if entry["returncode"] not in (0, None):
        entry.setdefault("error", f"exit status {entry['returncode']}")
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server for every benchmark; default: each starts its own")
    parser.add_argument("--skip", action="append", choices=sorted(BENCHMARKS), default=[], help="skip one (repeatable)")
    parser.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="extra arguments for one benchmark, e.g. concurrency='--runs 3' (repeatable)",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per benchmark (default 3600)")
    parser.add_argument("--out", type=Path, help="combined JSON path; default bench/results/all-<UTC>.json")
    args = parser.parse_args()
    extras: dict[str, list[str]] = {}
    for item in args.args:
        name, _, value = item.partition("=")
        if name not in BENCHMARKS:
            parser.error(f"--args {item!r}: no benchmark {name!r} (one of {', '.join(BENCHMARKS)})")
        extras[name] = shlex.split(value)
    stop_on_sigterm()
    stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    combined = new_report("all", args)
    combined["benchmarks"] = {}
    for name in BENCHMARKS:
        if name in args.skip:
            continue
        extra = [*(["--url", args.url] if args.url else []), *extras.get(name, [])]
        combined["benchmarks"][name] = run_one(name, RESULTS / f"{name}-{stamp}.json", extra, args.timeout)
    combined["failed"] = sorted(name for name, entry in combined["benchmarks"].items() if entry.get("error"))
    path = write_report(combined, args.out or RESULTS / f"all-{stamp}.json")
    for name, entry in combined["benchmarks"].items():
        status = "ok" if not entry.get("error") else entry["error"]
        sys.stdout.write(f"{name}: {status} ({entry['elapsed_s']:.0f}s) -> {entry['out']}\n")
    sys.stdout.write(f"wrote {path}\n")
    return 1 if combined["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
