"""Jobs: a long job's throughput alone and beside interactive load, and what a running job costs an interactive
newcomer's first audio.

    python -m bench.jobs [--chars 100000] [--alone-pieces 6] [--beside-pieces 3] [--whole] [--url URL] [--out PATH]

One job of `--chars` characters (a book in chapters of about 5,000) is submitted once and measured in two windows of
whole pieces, from one piece's end to a later one's, as the node reports them in `GET /jobs/{id}`: `alone`
(`--alone-pieces` pieces on an otherwise idle node, after the first piece, which pays for planning and warm-up) and
`beside` (`--beside-pieces` pieces while short interactive streams come one after another, `--gap-s` apart on
average, counted from the first piece that ended after they began). Then the job is cancelled and removed, or with
`--whole` run to its end (42-52 minutes for 100,000 characters alone on a 2-core machine). So a 100,000-character
job's speed is measured in about 6 minutes; the node's own ETA after the alone window is kept beside the projection
from the measured speed.

`newcomer`: the median first audio of a short stream on the idle node before the job, and while it runs: the
difference is what the job costs the newcomer (at most one job step by design). Writes
`bench/results/jobs-<UTC time>.json` (or `--out`). Timings move with the host's load; the JSON records it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
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
POLL_S = 0.25
KEY = "narrator"


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


@dataclass
class Progress:
    """A running job as its status says it, read every POLL_S: the moments its pieces ended."""

    client: httpx.Client
    job_id: str
    ends: list[tuple[float, int, float]] = field(default_factory=list)
    """(time, characters done, audio seconds done) at each piece's end, as first seen."""
    last: dict[str, Any] = field(default_factory=dict)

    def poll(self) -> dict[str, Any]:
        answer = self.client.get(f"/jobs/{self.job_id}", headers={"X-Fairness-Key": KEY})
        answer.raise_for_status()
        self.last = answer.json()
        done = self.last["pieces_done"]
        while len(self.ends) < done:  # a poll sees each piece's end at most POLL_S late
            self.ends.append((time.perf_counter(), self.last["chars_done"], self.last["audio_seconds"]))
        return self.last

    def wait_pieces(self, count: int) -> None:
        """Until `count` pieces have ended, or the job has."""
        while len(self.ends) < count and self.poll()["state"] in ("queued", "running"):
            time.sleep(POLL_S)


def window(ends: list[tuple[float, int, float]], first: int, last: int) -> dict[str, Any]:
    """Throughput between the end of piece `first` and the end of piece `last` (indexes into `ends`)."""
    (t0, c0, a0), (t1, c1, a1) = ends[first], ends[last]
    seconds = t1 - t0
    return {
        "pieces": last - first,
        "chars": c1 - c0,
        "audio_s": round(a1 - a0, 3),
        "wall_s": round(seconds, 3),
        "chars_per_s": (c1 - c0) / seconds if seconds > 0 else None,
        "audio_s_per_s": (a1 - a0) / seconds if seconds > 0 else None,
    }


def newcomers(url: str, count: int, stop: threading.Event | None = None, gap_s: float = 0.0) -> list[float]:
    """First audio of `count` short streams one after another (fewer if `stop` is set first), each `gap_s` seconds
    after the last one ended on average (exponentially distributed, seeded: people, not a loop)."""
    found: list[float] = []
    gaps = random.Random(7)
    for n in range(count):
        if stop is not None and stop.wait(gaps.expovariate(1 / gap_s) if gap_s and n else 0):
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
        began = time.perf_counter()
        answer = client.post("/jobs", json=body, headers={"X-Fairness-Key": KEY})
        answer.raise_for_status()
        progress = Progress(client, answer.json()["job_id"])
        accepted_s = time.perf_counter() - began
        progress.wait_pieces(1 + args.alone_pieces)
        alone = window(progress.ends, 0, args.alone_pieces)
        eta_s = progress.last.get("eta_s")
        stop = threading.Event()
        during: list[float] = []
        loader = threading.Thread(target=lambda: during.extend(newcomers(url, 10**6, stop, args.gap_s)))
        loader.start()
        try:
            progress.wait_pieces(len(progress.ends) + 1)  # the piece under way when they began
            first = len(progress.ends) - 1
            progress.wait_pieces(first + 1 + args.beside_pieces)
        finally:
            stop.set()
            loader.join()
        beside = window(progress.ends, first, len(progress.ends) - 1)
        if args.whole:
            progress.wait_pieces(progress.last["pieces_total"])
        status = progress.poll()
        client.delete(f"/jobs/{progress.job_id}", headers={"X-Fairness-Key": KEY})
    solo_s = statistics.median(solo) if solo else None
    during_s = statistics.median(during) if during else None
    speed = alone["chars_per_s"]
    return {
        "chars": args.chars,
        "job": {
            "chars_total": status["chars_total"],
            "pieces_total": status["pieces_total"],
            "chapters_total": status["chapters_total"],
            "accepted_s": round(accepted_s, 3),
            "pieces_done": status["pieces_done"],
            "state": status["state"],
            "whole": args.whole,
            "wall_s": round(time.perf_counter() - began, 3),
            "node_eta_s_after_alone": eta_s,
            "projected_alone_s": status["chars_total"] / speed if speed else None,
        },
        "alone": alone,
        "beside": {**beside, "newcomers": len(during), "newcomer_ttfa_s": stats(during)},
        "newcomer": {
            "solo_ttfa_s": solo_s,
            "beside_a_job_ttfa_s": during_s,
            "cost_s": during_s - solo_s if solo_s is not None and during_s is not None else None,
        },
        "throughput_kept": beside["chars_per_s"] / speed if speed and beside["chars_per_s"] else None,
        "failed": [] if status["state"] in (("done",) if args.whole else ("running", "queued", "done")) else ["jobs"],
    }


def describe(figure: dict[str, Any]) -> str:
    job, alone, beside, newcomer = figure["job"], figure["alone"], figure["beside"], figure["newcomer"]
    return (
        f"job of {job['chars_total']} chars in {job['pieces_total']} pieces (accepted in {job['accepted_s']} s): "
        f"alone {alone['chars_per_s']:.1f} chars/s ({alone['audio_s_per_s']:.2f} s of audio per s, {alone['pieces']} "
        f"pieces; whole job {job['projected_alone_s'] / 60:.0f} min at that speed, node's ETA "
        f"{job['node_eta_s_after_alone']} s), beside {beside['newcomers']} newcomers {beside['chars_per_s']:.1f} "
        f"chars/s; newcomer first audio {newcomer['solo_ttfa_s']:.2f} s alone, "
        f"{newcomer['beside_a_job_ttfa_s']:.2f} s beside the job"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (its own settings apply)")
    parser.add_argument("--chars", type=int, default=100_000, help="characters of the job (default 100000)")
    parser.add_argument("--alone-pieces", type=int, default=6, help="pieces timed on an idle node (default 6)")
    parser.add_argument("--beside-pieces", type=int, default=3, help="pieces timed beside newcomers (default 3)")
    parser.add_argument("--whole", action="store_true", help="run the job to its end (else cancel after the windows)")
    parser.add_argument("--newcomers", type=int, default=5, help="streams for the idle first-audio median (default 5)")
    parser.add_argument(
        "--gap-s",
        type=float,
        default=3.0,
        help="mean idle time between the newcomers beside the job (default 3; 0: one right after another, which "
        "leaves a job no time at all, as the background class means)",
    )

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
