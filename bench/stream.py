"""Streaming latency: time to first audio, total time and real-time factor of one request alone, over HTTP.

    python -m bench.stream                   # starts server.py on a free port with caches off, then stops it
    python -m bench.stream --url URL         # against a running server (start it with POLYTTS_*_CACHE_BYTES=0)

Writes `bench/results/stream-<UTC time>.json` (or `--out`) to compare run to run.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from bench.common import SHORT_TEXT, SIXTY_WORDS, local_server, measure_stream, new_report, run_main, server_view

CASES = {"one_sentence": SHORT_TEXT, "sixty_words": SIXTY_WORDS}


def summarize(runs: list[dict[str, float | str]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": runs}
    for key in ("ttfa_s", "total_s", "audio_s", "rtf"):
        values = [float(r[key]) for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    out["cache_hits"] = sum(r["cache"] == "hit" for r in runs)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = new_report("stream", args)
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server()).url
        report["server"] = server_view(url)
        with httpx.Client(base_url=url, timeout=600) as client:
            measure_stream(client, "Warm up.", args.voice)  # the first call pays for lazy set-up; not what we measure
            for name, text in CASES.items():
                runs = [measure_stream(client, text, args.voice) for _ in range(args.runs)]
                report["figures"][name] = {"words": len(text.split()), **summarize(runs)}
    return report


def summary(report: dict[str, Any]) -> str:
    lines = []
    for name, result in report["figures"].items():
        ttfa, total, rtf = (result[k]["median"] for k in ("ttfa_s", "total_s", "rtf"))
        lines.append(f"{name}: ttfa {ttfa:.3f}s  total {total:.3f}s  rtf {rtf:.3f}  (median of {len(result['runs'])})")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    return run_main("stream", lambda: run(args), args.out, summary)


if __name__ == "__main__":
    sys.exit(main())
