"""Jobs: a long job's throughput alone and beside interactive load, and what a running job costs an interactive
newcomer's first audio.

    python -m bench.jobs [--chars 100000] [--newcomers 5] [--url URL] [--out PATH]

Figures: `alone` (a job of `--chars` characters on an idle node: wall time, characters and audio seconds per second),
`beside` (the same job while interactive streams come one after another: the job's throughput then, and the streams'
first audio), and `newcomer` (the median first audio of a short stream on an idle node and while a job runs: the
difference is what the job costs the newcomer, at most one job step by design). Writes
`bench/results/jobs-<UTC time>.json` (or `--out`). Timings move with the host's load; the JSON records it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import httpx

from bench.common import SHORT_TEXT, figure_main, stats, wait_idle
from bench.concurrency import listen

SENTENCES = (
    "The lighthouse keeper climbed the stairs again at dusk.",
    "Below him the tide was turning, slow and grey.",
    "He wrote the hour in the log, as his father had done.",
    "A ship went by far out, its lamps like a row of stars.",
    "Nobody came to the island in winter, and he liked it so.",
)
POLL_S = 0.5


def book(chars: int) -> dict[str, Any]:
    """A job of about `chars` characters in chapters of about 5,000 (as a book would come)."""
    sentences, length, n = [], 0, 0
    while length < chars:
        sentence = f"{SENTENCES[n % len(SENTENCES)]} That was day {n + 1}."
        sentences.append(sentence)
        length += len(sentence) + 1
        n += 1
    per_chapter = max(1, len(sentences) * 5000 // max(length, 1))
    chapters = [
        {"title": f"Chapter {i // per_chapter + 1}", "text": " ".join(sentences[i : i + per_chapter])}
        for i in range(0, len(sentences), per_chapter)
    ]
    return {"chapters": chapters, "format": "opus"}


def run_job(client: httpx.Client, body: dict[str, Any], key: str) -> dict[str, Any]:
    """Submit a job and wait for its end: its wall time and throughput."""
    began = time.perf_counter()
    answer = client.post("/jobs", json=body, headers={"X-Fairness-Key": key})
    answer.raise_for_status()
    job_id = answer.json()["job_id"]
    while (status := client.get(f"/jobs/{job_id}", headers={"X-Fairness-Key": key}).json())["state"] in (
        "queued",
        "running",
    ):
        time.sleep(POLL_S)
    wall_s = time.perf_counter() - began
    client.delete(f"/jobs/{job_id}", headers={"X-Fairness-Key": key})
    return {
        "state": status["state"],
        "chars": status["chars_total"],
        "audio_s": status["audio_seconds"],
        "wall_s": wall_s,
        "chars_per_s": status["chars_total"] / wall_s,
        "audio_s_per_s": status["audio_seconds"] / wall_s,
    }


def newcomers(url: str, count: int, stop: threading.Event | None = None) -> list[float]:
    """First audio of `count` short streams one after another (fewer if `stop` is set first)."""
    found = []
    for n in range(count):
        if stop is not None and stop.is_set():
            break
        heard = listen(url, SHORT_TEXT, f"newcomer-{n}")
        if heard.ttfa_s is not None:
            found.append(heard.ttfa_s)
    return found


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    body = book(args.chars)
    with httpx.Client(base_url=url, timeout=120) as client:
        wait_idle(client)
        listen(url, SHORT_TEXT, "warm-up")
        solo = newcomers(url, args.newcomers)
        alone = run_job(client, body, "narrator-alone")
        wait_idle(client)
        stop = threading.Event()
        during: list[float] = []

        def load() -> None:
            during.extend(newcomers(url, 10**6, stop))

        loader = threading.Thread(target=load)
        loader.start()
        try:
            beside = run_job(client, body, "narrator-beside")
        finally:
            stop.set()
            loader.join()
    solo_s = statistics.median(solo) if solo else None
    during_s = statistics.median(during) if during else None
    return {
        "chars": args.chars,
        "alone": alone,
        "beside": {**beside, "newcomers": len(during), "newcomer_ttfa_s": stats(during)},
        "newcomer": {
            "solo_ttfa_s": solo_s,
            "beside_a_job_ttfa_s": during_s,
            "cost_s": during_s - solo_s if solo_s is not None and during_s is not None else None,
        },
        "throughput_kept": beside["chars_per_s"] / alone["chars_per_s"],
        "failed": [name for name, run in (("alone", alone), ("beside", beside)) if run["state"] != "done"],
    }


def describe(figure: dict[str, Any]) -> str:
    alone, beside, newcomer = figure["alone"], figure["beside"], figure["newcomer"]
    return (
        f"job of {figure['chars']} chars: alone {alone['chars_per_s']:.0f} chars/s ({alone['audio_s_per_s']:.1f}x "
        f"real time), beside {beside['newcomers']} newcomers {beside['chars_per_s']:.0f} chars/s; newcomer first "
        f"audio {newcomer['solo_ttfa_s']} s alone, {newcomer['beside_a_job_ttfa_s']} s beside the job"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (its own settings apply)")
    parser.add_argument("--chars", type=int, default=100_000, help="characters of the job (default 100000)")
    parser.add_argument("--newcomers", type=int, default=5, help="streams for the idle first-audio median (default 5)")

    def env(args: argparse.Namespace) -> dict[str, str]:
        return {
            "POLYTTS_JOBS_DIR": tempfile.mkdtemp(prefix="polytts-bench-jobs-"),
            "POLYTTS_MAX_JOB_CHARS": str(max(args.chars * 2, 500_000)),
            "POLYTTS_MAX_JOB_CHARS_PER_KEY": str(max(args.chars * 2, 2_000_000)),
            "POLYTTS_MAX_JOB_DISK_BYTES_PER_KEY": "0",
            "POLYTTS_JOBS_DISK_QUOTA_BYTES": "0",
        }

    return figure_main("jobs", parser, measure, describe, env)


if __name__ == "__main__":
    sys.exit(main())
