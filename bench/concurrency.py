"""Concurrent streams: how soon each stream starts, and whether a client playing it in real time stalls.

    python -m bench.concurrency              # starts its own server (caches off), anonymous then keyed clients
    python -m bench.concurrency --url URL    # a running server with caches off (its own limits apply)
    python -m bench.concurrency --runs 1 --clients 1,2 --burst 6 --only busy --only burst   # a quick look

Every stream is read as it arrives by a listener that starts playing at the first byte, plays in real time and
pauses when it runs dry: its time to first audio (TTFA) and its underrun (time spent paused after the first byte).
Each case runs with anonymous clients (no key: one queue) and with keyed ones (`X-Fairness-Key`):

- `busy`: TTFA of a one-sentence stream alone, and while a 63-word stream plays (started `--load-delay` s after the
  long one's first audio), median of `--runs`. Goal: at most 2x alone.
- `clients`: N clients (`--clients`, default 1..4) each stream a paragraph at once. Goal: every admitted client's
  first audio within its solo TTFA + one chunk, and no underrun while the streams' demand (N x the engine's GPU
  seconds per audio second) stays within the GPU thread.
- `clients_with_batch`: the same while one `/tts` client hammers the server in the background.
- `burst`: `--burst` streams (~16 s of audio each) at once. Goal: every admitted stream's first audio within solo
  + one chunk per stream admitted with it; the rest refused at once (429) with a Retry-After after which a retry
  is admitted (checked on `--retry-sample` of them).

"One chunk" is the GPU time of one later chunk: the median `synth` of a `/tts` of one chunk-sized sentence.
Writes `bench/results/concurrency-<UTC time>.json` (or `--out`) and prints a table.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    SHORT_TEXT,
    SIXTY_WORDS,
    Playback,
    int_list,
    local_server,
    new_report,
    run_main,
    section,
    server_timing,
    server_view,
    wait_idle,
)

PARAGRAPH = (
    "Ships that sail across the northern sea carry grain, timber and wool to the harbours of the south. The "
    "crossing takes four days in good weather, and the crews sing to pass the long night watches."
)
BURST_TEXT = (
    "The museum reopens on Monday after a long renovation. Its new wing holds paintings from the coastal towns, "
    "a room of old maps, and a quiet reading hall. Guided tours start every hour from the main staircase, and the "
    "cafe on the roof looks out over the river."
)
CHUNK_SENTENCE = "A sentence about as long as one later chunk of a stream, which the service makes in one step."
BATCH_TEXT = (
    "Batch work keeps the engine busy in the background: a long report read aloud for later, a chapter of a book, "
    "or a set of instructions. It is served from what the streams leave, by the weighted fair share between keys."
)


@dataclass
class Listening:
    """One streamed request, as a client playing it in real time from its first byte hears it."""

    status: int = 0
    code: str | None = None
    retry_after_s: float | None = None
    answered_s: float | None = None
    """Seconds until the status line (a refusal's latency)."""
    playback: Playback | None = None
    """What a listener playing it from its first byte heard (admitted streams)."""
    total_s: float | None = None
    error: str | None = None

    @property
    def ttfa_s(self) -> float | None:
        return self.playback.ttfa_s if self.playback else None

    @property
    def underrun_s(self) -> float:
        return self.playback.underrun_s if self.playback else 0.0


def listen(
    url: str,
    text: str,
    key: str | None,
    start: threading.Barrier | None = None,
    voice: str | None = None,
    first_audio: threading.Event | None = None,
) -> Listening:
    """Stream `text` and follow a real-time player's clock over the bytes as they arrive; `start`: wait for the
    others first; `first_audio`: set when the first audio arrives (or the request ends without any)."""
    heard = Listening()
    body = {"text": text, "language": "en", **({"voice_id": voice} if voice else {})}
    headers = {"X-Fairness-Key": key} if key else {}
    try:
        with httpx.Client(base_url=url, timeout=600) as client:
            if start is not None:
                start.wait(120)
            began = time.perf_counter()
            with client.stream("POST", "/tts/stream", json=body, headers=headers) as response:
                heard.status = response.status_code
                heard.answered_s = time.perf_counter() - began
                if response.status_code != 200:
                    response.read()
                    with contextlib.suppress(ValueError):
                        heard.code = response.json().get("code")
                    if "retry-after" in response.headers:
                        heard.retry_after_s = float(response.headers["retry-after"])
                    return heard
                rate = int(response.headers["x-sample-rate"])
                heard.playback = Playback(began)
                for chunk in response.iter_raw():
                    first = heard.playback.first_audio is None
                    heard.playback.heard(len(chunk) / 2 / rate, time.perf_counter())
                    if first and first_audio is not None:
                        first_audio.set()
            heard.total_s = time.perf_counter() - began
    except httpx.HTTPError as exc:
        heard.error = f"{type(exc).__name__}: {exc}"
    finally:
        if first_audio is not None:
            first_audio.set()
    return heard


def together(url: str, jobs: list[tuple[str, str | None]], voice: str | None) -> list[Listening]:
    """Start every (text, key) stream at the same instant; wait for all of them."""
    barrier = threading.Barrier(len(jobs))
    results: list[Listening] = [Listening() for _ in jobs]

    def one(index: int, text: str, key: str | None) -> None:
        results[index] = listen(url, text, key, barrier, voice)

    threads = [threading.Thread(target=one, args=(i, text, key), daemon=True) for i, (text, key) in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    return results


def public(heard: Listening) -> dict[str, Any]:
    fields = {k: v for k, v in asdict(heard).items() if k != "playback"}
    return fields | (heard.playback.public() if heard.playback else {"ttfa_s": None, "underrun_s": 0.0})


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class Hammer(threading.Thread):
    """One `/tts` client sending whole-file requests back to back until stopped."""

    def __init__(self, url: str, key: str | None, voice: str | None) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.voice = url, key, voice
        self.halt = threading.Event()
        self.done: list[float] = []
        self.statuses: dict[int, int] = {}

    def run(self) -> None:
        body = {"text": BATCH_TEXT, "language": "en", **({"voice_id": self.voice} if self.voice else {})}
        headers = {"X-Fairness-Key": self.key} if self.key else {}
        with httpx.Client(base_url=self.url, timeout=600) as client:
            while not self.halt.is_set():
                started = time.perf_counter()
                try:
                    status = client.post("/tts", json=body, headers=headers).status_code
                except httpx.HTTPError:
                    status = 0
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if status == 200:
                    self.done.append(time.perf_counter() - started)
                else:
                    self.halt.wait(0.5)

    def stop(self) -> dict[str, Any]:
        self.halt.set()
        self.join(600)
        return {"completed": len(self.done), "statuses": self.statuses, "median_total_s": median(self.done)}


@dataclass
class Reference:
    """Solo figures every case compares against."""

    short_ttfa_s: float
    paragraph_ttfa_s: float
    burst_ttfa_s: float
    chunk_s: float
    gpu_s_per_audio_s: float | None


def reference(url: str, args: argparse.Namespace, key: str | None) -> Reference:
    def solo(text: str) -> float:
        values = [listen(url, text, key, voice=args.voice).ttfa_s for _ in range(args.runs)]
        return statistics.median([v for v in values if v is not None])

    headers = {"X-Fairness-Key": key} if key else {}
    with httpx.Client(base_url=url, timeout=600) as client:
        wait_idle(client)
        client.post("/tts", json={"text": "Warm up.", "language": "en"}, headers=headers)
        synth = []
        for _ in range(max(3, args.runs)):
            response = client.post("/tts", json={"text": CHUNK_SENTENCE, "language": "en"}, headers=headers)
            synth.append(float(server_timing(response.headers.get("server-timing", "")).get("synth_s", 0.0)))
        speed: dict[str, dict[str, float]] = (
            client.get("/health").json()["inflight"].get("streams", {}).get("speed", {})
        )
    engine_speed = next(iter(speed.values()), {}).get("gpu_s_per_audio_s") if speed else None
    return Reference(solo(SHORT_TEXT), solo(PARAGRAPH), solo(BURST_TEXT), statistics.median(synth), engine_speed)


def busy(url: str, args: argparse.Namespace, keyed: bool, ref: Reference) -> dict[str, Any]:
    loaded: list[dict[str, Any]] = []
    for i in range(args.runs):
        with httpx.Client(base_url=url, timeout=60) as client:
            wait_idle(client)
        playing: list[Listening] = []
        started = threading.Event()
        key = "player" if keyed else None
        player = threading.Thread(
            target=lambda: playing.append(listen(url, SIXTY_WORDS, key, voice=args.voice, first_audio=started)),
            daemon=True,
        )
        player.start()
        started.wait(600)
        time.sleep(args.load_delay)  # into the long stream, not at a step boundary by construction
        short = listen(url, SHORT_TEXT, f"short-{i}" if keyed else None, voice=args.voice)
        player.join(600)
        loaded.append({"short": public(short), "long": public(playing[0]) if playing else None})
    ttfas = [r["short"]["ttfa_s"] for r in loaded if r["short"]["ttfa_s"] is not None]
    ratio = statistics.median(ttfas) / ref.short_ttfa_s if ttfas else None
    return {
        "goal": "short stream's first audio while a 63-word stream plays <= 2 x alone (medians)",
        "met": ratio is not None and ratio <= 2.0,
        "solo_ttfa_s": ref.short_ttfa_s,
        "loaded_ttfa_s": median(ttfas),
        "ratio": ratio,
        "long_underrun_s": [r["long"]["underrun_s"] for r in loaded if r["long"]],
        "runs": loaded,
    }


def clients(url: str, args: argparse.Namespace, keyed: bool, ref: Reference, batch: bool) -> dict[str, Any]:
    rows = []
    for n in args.clients:
        with httpx.Client(base_url=url, timeout=60) as client:
            wait_idle(client)
        hammer = Hammer(url, "batch" if keyed else None, args.voice) if batch else None
        if hammer is not None:
            hammer.start()
            time.sleep(args.load_delay)  # the batch client is busy before the streams arrive
        heard = together(url, [(PARAGRAPH, f"client-{i}" if keyed else None) for i in range(n)], args.voice)
        background = hammer.stop() if hammer is not None else None
        admitted = [h for h in heard if h.status == 200]
        bound = ref.paragraph_ttfa_s + ref.chunk_s
        demand = n * ref.gpu_s_per_audio_s if ref.gpu_s_per_audio_s is not None else None
        rows.append(
            {
                "clients": n,
                "admitted": len(admitted),
                "refused": dict(collections.Counter(h.code or str(h.status) for h in heard if h.status != 200)),
                "ttfa_s": [h.ttfa_s for h in admitted],
                "underrun_s": [h.underrun_s for h in admitted],
                "ttfa_bound_s": bound,
                "ttfa_met": all(h.ttfa_s is not None and h.ttfa_s <= bound for h in admitted),
                "demand": demand,
                "underrun_met": demand is None or demand > 1.0 or all(h.underrun_s <= 0.05 for h in admitted),
                "background": background,
                "streams": [public(h) for h in heard],
            }
        )
    return {
        "goal": "every admitted client's first audio <= solo + one chunk; no underrun while N x GPU s per audio s <= 1",
        "met": all(r["ttfa_met"] and r["underrun_met"] for r in rows),
        "rows": rows,
    }


def burst(url: str, args: argparse.Namespace, keyed: bool, ref: Reference) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
    keys = [("alpha" if i % 2 == 0 else "beta") if keyed else None for i in range(args.burst)]
    heard = together(url, [(BURST_TEXT, key) for key in keys], args.voice)
    admitted = [h for h in heard if h.status == 200]
    refused = [h for h in heard if h.status == 429]
    bound = ref.burst_ttfa_s + len(admitted) * ref.chunk_s
    retries = retry_sample(url, refused, keys, args)
    return {
        "goal": "admitted: first audio <= solo + one chunk per admitted stream; the rest 429 at once, and a retry after "
        "Retry-After admitted",
        "met": all(h.ttfa_s is not None and h.ttfa_s <= bound for h in admitted)
        and all(h.answered_s is not None and h.answered_s < 1.0 for h in refused)
        and all(r["status"] == 200 for r in retries),
        "streams": len(heard),
        "admitted": len(admitted),
        "refused": len(refused),
        "other": [public(h) for h in heard if h.status not in (200, 429)],
        "ttfa_s": sorted(h.ttfa_s for h in admitted if h.ttfa_s is not None),
        "ttfa_bound_s": bound,
        "underrun_s": [h.underrun_s for h in admitted],
        "refusal_latency_s": median([h.answered_s for h in refused if h.answered_s is not None]),
        "refusal_codes": sorted({h.code for h in refused if h.code}),
        "retry_after_s": sorted(h.retry_after_s for h in refused if h.retry_after_s is not None),
        "retries": retries,
    }


def retry_sample(
    url: str, refused: list[Listening], keys: list[str | None], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Retry a few refused streams once each, after their Retry-After (counted from the refusal), all at once."""
    sample = [h for h in refused if h.retry_after_s is not None][: args.retry_sample]
    results: list[dict[str, Any]] = [{} for _ in sample]

    def retry(index: int, heard: Listening) -> None:
        time.sleep(heard.retry_after_s or 0.0)
        again = listen(url, BURST_TEXT, keys[index % len(keys)], voice=args.voice)
        results[index] = {
            "retry_after_s": heard.retry_after_s,
            "status": again.status,
            "code": again.code,
            "ttfa_s": again.ttfa_s,
            "underrun_s": again.underrun_s,
        }

    threads = [threading.Thread(target=retry, args=(i, h), daemon=True) for i, h in enumerate(sample)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    return results


CASES = ("busy", "clients", "clients_with_batch", "burst")


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = new_report("concurrency", args)
    with contextlib.ExitStack() as stack:
        # Every client of this benchmark has the same address: the per-address share would hide the scheduler.
        url = args.url or stack.enter_context(local_server({"POLYTTS_MAX_CLIENT_SHARE": "1"})).url
        report["server"] = server_view(url)
        for mode in args.modes:
            keyed = mode == "keyed"
            try:
                ref = reference(url, args, "solo" if keyed else None)
            except Exception as exc:
                report["figures"][f"{mode}/reference"] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            report["figures"][f"{mode}/reference"] = asdict(ref)
            for case in args.only or CASES:
                if case == "busy":
                    section(report, f"{mode}/busy", lambda: busy(url, args, keyed, ref))
                elif case in ("clients", "clients_with_batch"):
                    batch = case == "clients_with_batch"
                    section(report, f"{mode}/{case}", lambda: clients(url, args, keyed, ref, batch))
                else:
                    section(report, f"{mode}/burst", lambda: burst(url, args, keyed, ref))
    return report


def table(report: dict[str, Any]) -> str:
    """The figures as one Markdown table per mode."""

    def s(value: float | None) -> str:
        return f"{value:.2f} s" if value is not None else "-"

    lines: list[str] = []
    for mode in ("anonymous", "keyed"):
        figures = {name.split("/", 1)[1]: fig for name, fig in report["figures"].items() if name.startswith(mode + "/")}
        if not figures:
            continue
        lines += [f"\n{mode} clients", "", "| case | measured | goal met |", "|---|---|---|"]
        for name, fig in figures.items():
            if "error" in fig:
                lines.append(f"| {name} | failed: {fig['error']} | |")
            elif name == "reference":
                lines.append(
                    f"| solo | first audio: sentence {s(fig['short_ttfa_s'])}, paragraph {s(fig['paragraph_ttfa_s'])}, "
                    f"burst text {s(fig['burst_ttfa_s'])}; one chunk {s(fig['chunk_s'])}; "
                    f"GPU s per audio s {fig['gpu_s_per_audio_s']} | |"
                )
            elif name == "busy":
                lines.append(
                    f"| busy | sentence's first audio {s(fig['loaded_ttfa_s'])} while a 63-word stream plays "
                    f"({fig['ratio']:.2f}x alone) | {fig['met']} |"
                    if fig["ratio"] is not None
                    else f"| busy | no audio | {fig['met']} |"
                )
            elif name in ("clients", "clients_with_batch"):
                for row in fig["rows"]:
                    ttfa = ", ".join(f"{t:.2f}" for t in row["ttfa_s"] if t is not None)
                    under = sum(row["underrun_s"])
                    refused = f"; refused {row['refused']}" if row["refused"] else ""
                    lines.append(
                        f"| {name} N={row['clients']} | first audio [{ttfa}] s (bound {row['ttfa_bound_s']:.2f} s), "
                        f"underrun {under:.2f} s{refused} | {row['ttfa_met'] and row['underrun_met']} |"
                    )
            elif name == "burst":
                retries = [r.get("status") for r in fig["retries"]]
                lines.append(
                    f"| burst of {fig['streams']} | admitted {fig['admitted']} (first audio {s(median(fig['ttfa_s']))} "
                    f"median, {s(max(fig['ttfa_s'], default=None))} worst; bound {fig['ttfa_bound_s']:.2f} s), refused "
                    f"{fig['refused']} in {s(fig['refusal_latency_s'])} with Retry-After "
                    f"{fig['retry_after_s'][:1] + fig['retry_after_s'][-1:]} s; retries after it: {retries} | {fig['met']} |"
                )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches off; default: start one")
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--runs", type=int, default=5, help="runs for each median (default 5)")
    parser.add_argument(
        "--clients",
        type=int_list,
        default=[1, 2, 3, 4],
        help="numbers of simultaneous clients, comma-separated (default 1,2,3,4)",
    )
    parser.add_argument("--burst", type=int, default=50, help="streams sent at once in the burst (default 50)")
    parser.add_argument("--retry-sample", type=int, default=3, help="refused burst streams retried (default 3)")
    parser.add_argument("--load-delay", type=float, default=1.0, help="s between a background load and the measure")
    parser.add_argument(
        "--modes", type=lambda v: v.split(","), default=["anonymous", "keyed"], help="anonymous,keyed (default both)"
    )
    parser.add_argument("--only", action="append", choices=CASES, help="run only these cases (repeatable)")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    return run_main("concurrency", lambda: run(args), args.out, table)


if __name__ == "__main__":
    sys.exit(main())
