"""Contention: a newcomer's first audio while streams play, what short steps cost, and what parallel ONNX sessions
buy; each against its reference measured in the same run.

    python -m bench.contention                          # starts the servers it needs (caches off), ~30 minutes
    python -m bench.contention --only first_audio --runs 3
    python -m bench.contention --only newcomer --sessions 1 --running 1

Figures, each with its goal and `met`:

- `newcomer/<sessions>/<mode>`: for 1 and 2 steps at once (`POLYTTS_ONNX_PARALLEL_STEPS`, `--sessions`), for
  anonymous and keyed clients, with 1-3 streams of the 63-word text playing (`--running`, started one after
  another; those admitted), the first audio of a one-sentence stream `--load-delay` s after the last one's first
  audio (as `bench.concurrency`'s `busy`), against the same sentence alone on the same server (medians of
  `--runs`). Goal: within 1 s of alone, and no underrun for the streams playing.
- `long_clause/<yield>/<mode>`: as `newcomer` (one session, one stream playing), behind a text that opens with one
  177-character clause (`CLAUSE_TEXT`), with the stream's step stopped for the newcomer (`stream_yield`, the
  default) and not (`POLYTTS_STREAM_YIELD_S=0`, `no_yield`: the newcomer waits for the clause under way). Goal:
  within 0.5 s of alone (the issue's bound), no underrun. `--load-delay 0` sends the newcomer at the stream's first
  audio.
- `short_step_cost`: the GPU seconds (`/health`, the key's used time) of one long stream (the 63-word text and the
  long-clause one), alone and with a newcomer arriving, on one session with short steps (`POLYTTS_SHORT_STEP_S`
  default, a newcomer given the step under way) and without either (`POLYTTS_SHORT_STEP_S=0`, `POLYTTS_STREAM_YIELD_S=0`).
  Goal: at most 5 % more.
- `sessions`: with 1 and 2 sessions, the audio seconds per second of whole-file work from `--batch-clients` at once, the
  slowdown the server learned for two steps at once, how many of `--burst` long streams at once are admitted (and
  whether they keep real time), and whether a one-sentence stream of another client is admitted while a
  180-character sentence streams.
- `first_audio`: time to first audio of a 10-word and a 61-word text through `/tts/stream`, against the raw engine
  (Kokoro int8 on ONNX Runtime called in this process on the whole text, as a library caller would), alternating;
  the server runs the route its flags pick (`server_route`; POLYTTS_KOKORO_ONNX_ROUTE in the environment sets it).
  Goal: at most the raw engine's (medians).

Writes `bench/results/contention-<UTC time>.json` (or `--out`) and prints a table. Timings move with the load of the
machine: `host.load_average` is in the report.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    SHORT_TEXT,
    SIXTY_WORDS,
    in_process_engine,
    int_list,
    local_server,
    new_report,
    run_main,
    section,
    server_view,
    wait_idle,
)
from bench.concurrency import Listening, listen, median, public

LONG_TEXT = (
    "The old lighthouse stands at the end of the northern pier, where the water turns deep and cold. For more than "
    "a century its keepers climbed the spiral stairs each evening, trimmed the wick, and wound the clockwork that "
    "turned the great lens. Ships saw the beam from far out at sea, counted its flashes, and knew which harbour "
    "lay ahead of them, even on the darkest winter nights."
)
"""A long stream whose cost `short_step_cost` measures: about 20 s of audio, most of it in clauses a short step can
end at, one of them 75 characters long."""
SENTENCE_180 = (
    "Across the valley the morning mist lifted slowly from the river while the farmers walked out to the fields "
    "and the first trains of the day rolled over the iron bridge toward the city"
)
"""One 180-character sentence (no comma: one clause), as in the issue that asked for a second stream."""
CLAUSE_TEXT = (
    "Long before the first fishing boats of the morning had left the harbour the old keeper who looked after the "
    "lighthouse had already climbed its narrow stairs to watch the weather. Clouds were gathering over the hills, "
    "the wind had turned, and the sea below was growing restless. She wrote it all down in the logbook."
)
"""A stream whose first sentence is one 177-character clause: without cuts inside a clause, a short step after its
first waits for the rest of that clause (over 100 characters, about 2 s here)."""
TEN_WORDS = "Please call me back when you have a free minute."
WHOLE_FILE_TEXTS = (
    "The library opens at nine in the morning and closes at six in the evening. Visitors can borrow up to five "
    "books at a time, and returns are accepted at the front desk or through the slot by the main door.",
    "Fresh bread is baked every day before sunrise. The bakers mix the flour, water and salt by hand, let the "
    "dough rest for several hours, and shape each loaf carefully before it goes into the hot stone oven.",
)
NEWCOMER_SLACK_S = 1.0
"""Goal: a newcomer's first audio at most this much later than alone."""
CLAUSE_SLACK_S = 0.5
"""Goal behind a long clause: a newcomer's first audio at most this much later than alone (issue 33's bound)."""
COST_BUDGET = 0.05
"""Goal: short steps cost at most this share of a stream's GPU time."""
UNDERRUN_TOLERANCE_S = 0.05
FIGURES = ("newcomer", "long_clause", "short_step_cost", "sessions", "first_audio")


@contextlib.contextmanager
def server(args: argparse.Namespace, **env: str) -> Iterator[str]:
    """`--url`'s server (whatever its settings), else one of this benchmark's own with `env` (POLYTTS_* names)."""
    if args.url:
        yield args.url
        return
    # Every client here has the same address: the per-address share would hide the scheduler.
    with local_server({"POLYTTS_MAX_CLIENT_SHARE": "1", **env}) as own:
        yield own.url


def used_gpu_s(client: httpx.Client, key: str) -> float:
    """GPU seconds the key has used, as `/health` reports it (remembered while the key was active lately)."""
    keys = client.get("/health").json().get("inflight", {}).get("keys", {})
    return float(keys.get(key, {}).get("used_gpu_s", 0.0))


def engine_speed(client: httpx.Client) -> dict[str, Any]:
    speed: dict[str, Any] = client.get("/health").json().get("inflight", {}).get("streams", {}).get("speed", {})
    return next(iter(speed.values()), {})


@dataclass
class Trial:
    """One newcomer trial: the streams already playing when it came, and the newcomer itself."""

    running: list[Listening]
    newcomer: Listening


def playing_then_newcomer(
    url: str,
    running: int,
    key: Callable[[str], str | None],
    load_delay: float,
    voice: str | None,
    ahead: str = SIXTY_WORDS,
) -> Trial:
    """Start `running` streams of `ahead` one after another (each once the one before has its first audio), then,
    once the last has played `load_delay` s, the newcomer; wait for all of them."""
    heard: list[Listening] = []
    threads = []
    for index in range(running):
        started = threading.Event()

        def play(index: int = index, started: threading.Event = started) -> None:
            heard.append(listen(url, ahead, key(f"playing-{index}"), voice=voice, first_audio=started))

        thread = threading.Thread(target=play, daemon=True)
        thread.start()
        threads.append(thread)
        started.wait(600)
    time.sleep(load_delay)  # into the running streams, not at a step boundary by construction
    newcomer = listen(url, SHORT_TEXT, key("newcomer"), voice=voice)
    for thread in threads:
        thread.join(900)
    return Trial(heard, newcomer)


def newcomer_row(solo_s: float, trials: list[Trial], running: int, slack_s: float = NEWCOMER_SLACK_S) -> dict[str, Any]:
    """The newcomer's wait against alone over the trials, and what the streams playing heard."""
    ttfas = [t.newcomer.ttfa_s for t in trials if t.newcomer.ttfa_s is not None]
    loaded = median(ttfas)
    underruns = [h.underrun_s for t in trials for h in t.running if h.status == 200]
    admitted = [sum(h.status == 200 for h in t.running) for t in trials]
    refused = [h.code or str(h.status) for t in trials for h in [*t.running, t.newcomer] if h.status != 200]
    extra = None if loaded is None else loaded - solo_s
    return {
        "running": running,
        "admitted_running": admitted,
        "solo_ttfa_s": solo_s,
        "loaded_ttfa_s": loaded,
        "extra_s": extra,
        "ratio": None if loaded is None else loaded / solo_s,
        "running_underrun_s": underruns,
        "refused": refused,
        "met": extra is not None and extra <= slack_s and all(u <= UNDERRUN_TOLERANCE_S for u in underruns),
        "trials": [{"running": [public(h) for h in t.running], "newcomer": public(t.newcomer)} for t in trials],
    }


def newcomer(
    url: str,
    args: argparse.Namespace,
    keyed: bool,
    ahead: str = SIXTY_WORDS,
    running_counts: list[int] | None = None,
    slack_s: float = NEWCOMER_SLACK_S,
) -> dict[str, Any]:
    """The newcomer's first audio alone, then with 1-3 streams of `ahead` playing (`--running`)."""

    def key(role: str, run: int = 0) -> str | None:
        return f"{role}-{run}" if keyed else None

    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
    listen(url, SHORT_TEXT, key("warm-up"), voice=args.voice)
    solo = [listen(url, SHORT_TEXT, key("solo", i), voice=args.voice).ttfa_s for i in range(args.runs)]
    solo_s = statistics.median([s for s in solo if s is not None])
    rows = []
    for running in running_counts or args.running:
        trials = []
        for run in range(args.runs):
            with httpx.Client(base_url=url, timeout=60) as client:
                wait_idle(client)
            trials.append(
                playing_then_newcomer(url, running, lambda role: key(role, run), args.load_delay, args.voice, ahead)
            )
        rows.append(newcomer_row(solo_s, trials, running, slack_s))
    return {
        "goal": f"a newcomer's first audio within {slack_s:.1f} s of alone (medians), no underrun for the "
        "streams playing",
        "met": all(row["met"] for row in rows),
        "solo_ttfa_s": solo_s,
        "rows": rows,
    }


def stream_cost(url: str, args: argparse.Namespace, key: str, with_newcomer: bool, text: str = LONG_TEXT) -> float:
    """GPU seconds one long stream of `text` and key `key` takes, a newcomer arriving `--load-delay` s into it or
    not."""
    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
        before = used_gpu_s(client, key)
        if with_newcomer:
            playing_then_newcomer(
                url,
                1,
                lambda role: key if role.startswith("playing") else f"{key}-new",
                args.load_delay,
                args.voice,
                text,
            )
        else:
            listen(url, text, key, voice=args.voice)
        return used_gpu_s(client, key) - before


COST_CASES = {"alone": (LONG_TEXT, False), "newcomer": (LONG_TEXT, True), "long_clause_newcomer": (CLAUSE_TEXT, True)}
"""The streams whose GPU seconds `short_step_cost` compares: (text, a newcomer arriving into it)."""


def short_step_cost(args: argparse.Namespace) -> dict[str, Any]:
    measured: dict[str, dict[str, float | None]] = {}
    for label, env in (
        ("short_steps", {}),
        ("whole_steps", {"POLYTTS_SHORT_STEP_S": "0", "POLYTTS_STREAM_YIELD_S": "0"}),
    ):
        with server(args, POLYTTS_ONNX_PARALLEL_STEPS="1", **env) as url:
            listen(url, SHORT_TEXT, "warm-up", voice=args.voice)
            measured[label] = {
                case: median([stream_cost(url, args, f"{label}-{case}-{i}", arrives, text) for i in range(args.runs)])
                for case, (text, arrives) in COST_CASES.items()
            }
    cost = {
        case: (on / off - 1)
        if (on := measured["short_steps"][case]) and (off := measured["whole_steps"][case])
        else None
        for case in COST_CASES
    }
    return {
        "goal": f"a long stream's GPU seconds with short steps at most {COST_BUDGET:.0%} above whole steps (one session)",
        "met": all(c is not None and c <= COST_BUDGET for c in cost.values()),
        "gpu_s": measured,
        "cost": cost,
    }


def whole_file_throughput(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """`--batch-clients` clients each sending whole-file requests back to back, `--runs` each: audio seconds per wall
    second (with more than two, two are always ready to step together)."""
    audio = [0.0] * args.batch_clients

    def client_loop(index: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as client:
            for run in range(args.runs):
                text = WHOLE_FILE_TEXTS[(index + run) % len(WHOLE_FILE_TEXTS)]
                body = {
                    "text": text,
                    "language": "en",
                    "format": "pcm",
                    **({"voice_id": args.voice} if args.voice else {}),
                }
                response = client.post("/tts", json=body, headers={"X-Fairness-Key": f"batch-{index}"})
                response.raise_for_status()
                audio[index] += len(response.content) / 2 / int(response.headers["x-sample-rate"])

    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
    began = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(args.batch_clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(1800)
    wall = time.perf_counter() - began
    return {"audio_s": sum(audio), "wall_s": wall, "audio_s_per_s": sum(audio) / wall}


def burst_of_streams(url: str, args: argparse.Namespace) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
    heard: list[Listening] = [Listening() for _ in range(args.burst)]
    start = threading.Barrier(args.burst)

    def one(index: int) -> None:
        heard[index] = listen(url, LONG_TEXT, f"burst-{index}", start, args.voice)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(args.burst)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(1800)
    admitted = [h for h in heard if h.status == 200]
    return {
        "streams": args.burst,
        "admitted": len(admitted),
        "underrun_s": [h.underrun_s for h in admitted],
        "kept_real_time": all(h.underrun_s <= UNDERRUN_TOLERANCE_S for h in admitted),
        "refused": sorted(h.code or str(h.status) for h in heard if h.status != 200),
    }


def second_stream(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """While an anonymous client streams a 180-character sentence, another's one-sentence stream."""
    with httpx.Client(base_url=url, timeout=60) as client:
        wait_idle(client)
    started = threading.Event()
    playing: list[Listening] = []
    thread = threading.Thread(
        target=lambda: playing.append(listen(url, SENTENCE_180, None, voice=args.voice, first_audio=started)),
        daemon=True,
    )
    thread.start()
    started.wait(600)
    time.sleep(args.load_delay)
    other = listen(url, SHORT_TEXT, None, voice=args.voice)
    thread.join(900)
    return {"first": public(playing[0]) if playing else None, "second": public(other) | {"status": other.status}}


def sessions(args: argparse.Namespace) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for count in (1, 2):
        with server(args, POLYTTS_ONNX_PARALLEL_STEPS=str(count)) as url:
            listen(url, SHORT_TEXT, "warm-up", voice=args.voice)
            throughput = whole_file_throughput(url, args)  # also measures the speed of steps beside each other
            with httpx.Client(base_url=url, timeout=60) as client:
                learned = engine_speed(client)
            rows[str(count)] = {
                "throughput": throughput,
                "learned": learned,
                "burst": burst_of_streams(url, args),
                "second_stream": second_stream(url, args),
            }
    one, two = rows["1"], rows["2"]
    gain = two["throughput"]["audio_s_per_s"] / one["throughput"]["audio_s_per_s"]
    return {
        "goal": "two sessions make more audio per second than one, admit at least as many streams, and every "
        "admitted stream keeps real time",
        "met": gain > 1.0
        and two["burst"]["admitted"] >= one["burst"]["admitted"]
        and all(row["burst"]["kept_real_time"] for row in rows.values()),
        "throughput_ratio": gain,
        "admitted": {count: row["burst"]["admitted"] for count, row in rows.items()},
        "second_stream_status": {count: row["second_stream"]["second"]["status"] for count, row in rows.items()},
        "rows": rows,
    }


def first_audio(url: str, args: argparse.Namespace) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=60) as client:
        kokoro = client.get("/health").json()["engines"]["kokoro"]
    threads = kokoro.get("threads")
    # The raw engine is always the int8 graph on ONNX Runtime: the reference a faster route is measured against.
    overrides: dict[str, Any] = {"onnx_parallel_steps": 1, "kokoro_onnx_route": "int8"}
    if threads:
        overrides["onnx_threads"] = threads
    texts = {"ten_words": TEN_WORDS, "sixty_one_words": SIXTY_WORDS}
    runs: dict[str, dict[str, list[float]]] = {name: {"raw": [], "http": []} for name in texts}
    with in_process_engine(args.voice, **overrides) as engine:

        def raw(text: str) -> float:
            started = time.perf_counter()
            pieces = engine.raw(text)
            next(pieces)
            elapsed = time.perf_counter() - started
            for _ in pieces:  # the rest, so that the next run starts from the same state
                pass
            return elapsed

        def http(text: str) -> float:
            heard = listen(url, text, "first-audio", voice=args.voice)
            if heard.ttfa_s is None:
                raise RuntimeError(f"no audio: {heard.status} {heard.code} {heard.error}")
            return heard.ttfa_s

        for name, text in texts.items():
            raw(text), http(text)  # lazy set-up on both sides is not what is measured
            for i in range(args.runs):
                for side in ("raw", "http") if i % 2 == 0 else ("http", "raw"):
                    time.sleep(args.pause)  # ONNX Runtime's threads spin briefly after a run
                    runs[name][side].append(raw(text) if side == "raw" else http(text))
    rows: dict[str, dict[str, Any]] = {}
    for name, measured in runs.items():
        raw_s, http_s = statistics.median(measured["raw"]), statistics.median(measured["http"])
        rows[name] = {"raw_s": raw_s, "http_s": http_s, "ratio": http_s / raw_s, "runs": measured}
    return {
        "goal": "first audio through /tts/stream at most the raw engine's (the whole text in one call), medians",
        "met": all(float(row["ratio"]) <= 1.0 for row in rows.values()),
        "server_route": kokoro.get("route"),
        "raw_route": "int8",
        "texts": texts,
        "rows": rows,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = new_report("contention", args)
    only = args.only or FIGURES
    if "newcomer" in only:
        for count in args.sessions:
            with server(args, POLYTTS_ONNX_PARALLEL_STEPS=str(count)) as url:
                report.setdefault("servers", {})[f"sessions-{count}"] = server_view(url)
                for mode in ("anonymous", "keyed"):
                    section(report, f"newcomer/{count}/{mode}", lambda: newcomer(url, args, mode == "keyed"))
    if "long_clause" in only:
        for cuts, env in (("stream_yield", {}), ("no_yield", {"POLYTTS_STREAM_YIELD_S": "0"})):
            with server(args, POLYTTS_ONNX_PARALLEL_STEPS="1", **env) as url:
                report.setdefault("servers", {})[f"long_clause-{cuts}"] = server_view(url)
                for mode in ("anonymous", "keyed"):
                    section(
                        report,
                        f"long_clause/{cuts}/{mode}",
                        lambda: newcomer(url, args, mode == "keyed", CLAUSE_TEXT, [1], CLAUSE_SLACK_S),
                    )
    if "short_step_cost" in only:
        section(report, "short_step_cost", lambda: short_step_cost(args))
    if "sessions" in only:
        section(report, "sessions", lambda: sessions(args))
    if "first_audio" in only:
        with server(args) as url:
            section(report, "first_audio", lambda: first_audio(url, args))
    report["failed"] = sorted(name for name, fig in report["figures"].items() if "error" in fig or not fig["met"])
    return report


def table(report: dict[str, Any]) -> str:
    def s(value: float | None) -> str:
        return f"{value:.2f} s" if value is not None else "-"

    lines = ["| figure | measured | goal met |", "|---|---|---|"]
    for name, fig in report["figures"].items():
        if "error" in fig:
            lines.append(f"| {name} | failed: {fig['error']} | |")
        elif name.startswith(("newcomer/", "long_clause/")):
            for row in fig["rows"]:
                lines.append(
                    f"| {name} with {row['running']} playing | {s(row['loaded_ttfa_s'])} against {s(row['solo_ttfa_s'])} "
                    f"alone ({row['ratio'] or 0:.2f}x, +{row['extra_s'] or 0:.2f} s); playing streams' underrun "
                    f"{sum(row['running_underrun_s']):.2f} s; refused {row['refused']} | {row['met']} |"
                )
        elif name == "short_step_cost":
            cost = ", ".join(f"{case} {c:+.1%}" if c is not None else f"{case} -" for case, c in fig["cost"].items())
            lines.append(f"| short-step cost (GPU s of a long stream) | {cost} | {fig['met']} |")
        elif name == "sessions":
            lines.append(
                f"| 2 sessions against 1 | throughput {fig['throughput_ratio']:.2f}x; long streams admitted of "
                f"{fig['rows']['1']['burst']['streams']}: {fig['admitted']}; a second client's sentence beside a "
                f"180-character one: {fig['second_stream_status']} | {fig['met']} |"
            )
        elif name == "first_audio":
            for text, row in fig["rows"].items():
                lines.append(
                    f"| first audio, {text} | /tts/stream {s(row['http_s'])}, raw engine {s(row['raw_s'])} "
                    f"({row['ratio']:.2f}x) | {row['ratio'] <= 1.0} |"
                )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="one running server with caches off for every figure (its own settings apply)")
    parser.add_argument("--voice", help="a built-in voice; default: the server's default voice")
    parser.add_argument("--runs", type=int, default=3, help="runs for each median (default 3)")
    parser.add_argument(
        "--running",
        type=int_list,
        default=[1, 2, 3],
        help="numbers of long streams playing when the newcomer comes, comma-separated (default 1,2,3)",
    )
    parser.add_argument(
        "--sessions",
        type=int_list,
        default=[1, 2],
        help="POLYTTS_ONNX_PARALLEL_STEPS values of the newcomer figure, comma-separated (default 1,2)",
    )
    parser.add_argument("--burst", type=int, default=4, help="long streams sent at once per session count (default 4)")
    parser.add_argument("--batch-clients", type=int, default=4, help="whole-file clients at once (default 4)")
    parser.add_argument("--load-delay", type=float, default=1.0, help="s between a stream's first audio and the next")
    parser.add_argument("--pause", type=float, default=0.5, help="s between first-audio runs (default 0.5)")
    parser.add_argument("--only", action="append", choices=FIGURES, help="run only these figures (repeatable)")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    return run_main("contention", lambda: run(args), args.out, table)


if __name__ == "__main__":
    sys.exit(main())
