"""Run every benchmark and combine their results into one JSON file.

    python bench/run_all.py                         # bench/stream.py, then bench/fairness.py, each starting its own server
    python bench/run_all.py --url URL               # both against a running server (caches off; see each script)
    python bench/run_all.py --skip stream           # only some of them
    python bench/run_all.py --fairness-args "--runs 5 --share-seconds 60"

Each benchmark runs as a subprocess with this same Python and writes its own JSON (`--out` is passed, into
`bench/results/`); this script reads those files back and writes `bench/results/all-<UTC time>.json` holding all of
them, with each one's exit status and duration. It exits non-zero when any benchmark failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = {"stream": "bench/stream.py", "fairness": "bench/fairness.py"}


def run_one(name: str, script: str, out: Path, extra: list[str], timeout: float | None) -> dict[str, Any]:
    command = [sys.executable, script, "--out", str(out), *extra]
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
    parser.add_argument("--skip", action="append", choices=sorted(BENCHMARKS), default=[], help="skip a benchmark (repeatable)")
    parser.add_argument("--stream-args", default="", help="extra arguments for bench/stream.py, one string")
    parser.add_argument("--fairness-args", default="", help="extra arguments for bench/fairness.py, one string")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per benchmark (default 1800)")
    parser.add_argument("--out", type=Path, help="combined JSON path; default bench/results/all-<UTC>.json")
    args = parser.parse_args()

    def on_sigterm(signum: int, frame: object) -> None:  # unwind, so the running benchmark is stopped too
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_sigterm)
    stamp = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    results_dir = ROOT / "bench" / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    extras = {"stream": shlex.split(args.stream_args), "fairness": shlex.split(args.fairness_args)}
    combined: dict[str, Any] = {
        "benchmark": "all",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "url": args.url,
        "benchmarks": {},
    }
    for name, script in BENCHMARKS.items():
        if name in args.skip:
            continue
        extra = [*(["--url", args.url] if args.url else []), *extras[name]]
        out = results_dir / f"{name}-{stamp}.json"
        combined["benchmarks"][name] = run_one(name, script, out, extra, args.timeout)
    failed = sorted(name for name, entry in combined["benchmarks"].items() if entry.get("error"))
    combined["failed"] = failed
    out = args.out or results_dir / f"all-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(combined, indent=2) + "\n")
    for name, entry in combined["benchmarks"].items():
        status = "ok" if not entry.get("error") else entry["error"]
        sys.stdout.write(f"{name}: {status} ({entry['elapsed_s']:.0f}s) -> {entry['out']}\n")
    sys.stdout.write(f"wrote {out}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
