"""Live text in, speech out: a simulated language model writes the 60-word text while the server speaks it.

    python -m bench.live                        # starts server.py (caches off); both live routes, 3 runs each
    python -m bench.live --url URL --api-key KEY --runs 1 --tokens-per-s 50

The text (bench/common.py SIXTY_WORDS) is cut into word-ish tokens (a word with its leading space, or a run of
punctuation) sent at `--tokens-per-s` (30) as `{"text": token}` messages, over the WebSocket `/tts/live/ws` (the
`websockets` client; key as the subprotocol `bearer.<base64url>`; ends with `{"end": true}`) and over `POST /tts/live`
(an NDJSON body sent chunk by chunk while the audio is read, on a raw HTTP/1.1 connection: bench/duplex_http.py).

The phrases are those the server speaks, as its `words` events say (one per phrase, after its audio): the server
speaks a clause as soon as it is complete while nothing of the request waits to be spoken, and packs clauses while
phrases wait, so the cuts may differ run to run. A phrase is complete at the token where the text up to its end is
decided (`text.PhraseSegmenter` releasing every complete clause, token by token). A phrase's first audio is the first
audio after the previous phrase's `words` event; over HTTP, which has no events, the first audio at the byte offset
where the WebSocket run's phrase started, when both runs' audio is as long (the same cuts); otherwise only its
playback is reported.

Reported per phrase (medians over the runs that spoke it): the delay from the arrival of its last token to its first
audio, split into the wait for text (until the token that completed the phrase: a mark is decided by the text after
it, one word at a full stop), the wait for the GPU thread (the previous phrase still being spoken) and the synthesis
from then; and the time to first audio of the same phrase alone as a `/tts/stream` request. Goal: each phrase's
delay within 100 ms of that. For each run, a client playing from the first byte in real time: the total and longest
stall. Goal: no stall while generation is faster than real time (the `/tts/stream` requests' real-time factor below
1). Writes `bench/results/live-<UTC time>.json` (or `--out`) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import json
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.common import SIXTY_WORDS, Playback, figure_main, measure_stream
from bench.duplex_http import DuplexRequest
from settings import load_settings
from text.chunking import PhraseSegmenter

GOAL_EXCESS_S = 0.100
_TOKEN = re.compile(r"\s*(?:[\w'’]+|[^\w\s]+)")


def tokens(text: str) -> list[str]:
    """Word-ish tokens as a language model emits them: a word with its leading space, or a run of punctuation."""
    found = _TOKEN.findall(text)
    assert "".join(found) == text.rstrip(), "the tokens must cover the text"
    return found


@dataclass(frozen=True)
class Phrase:
    text: str
    last_token: int
    """Index of the token holding its last character."""
    completing_token: int
    """Index of the token whose arrival decided it; len(tokens) for the end of the text."""


def phrases(parts: list[str], spoken: list[str], first_chunk_chars: int, chunk_chars: int) -> list[Phrase]:
    """The phrases the server spoke (its `words` events, in order), each with the token holding its last character
    and the earliest token whose arrival let the server speak it. The server speaks a clause once the text after its
    mark decides it when nothing of the request waits to be spoken, and packs clauses while phrases wait; so a
    phrase is complete at the token where a segmenter that releases every complete clause at once (the first case)
    has decided the text up to its end."""
    whole = "".join(parts)
    ends = [len("".join(parts[: i + 1])) for i in range(len(parts))]
    segmenter = PhraseSegmenter(first_chunk_chars, chunk_chars)
    decided: list[tuple[int, int]] = []  # (end of the text decided, token index that decided it)
    position = 0
    for index in range(len(parts) + 1):
        chunks = segmenter.feed(parts[index]) + segmenter.release() if index < len(parts) else segmenter.flush()
        for chunk in chunks:
            position = whole.find(chunk.text, position) + len(chunk.text)
            decided.append((position, index))
    found: list[Phrase] = []
    searched = 0
    for text in spoken:
        at = whole.find(text, searched)
        assert at >= 0, f"phrase {text!r} is not in the text as sent"
        searched = at + len(text)
        completing = next((index for end, index in decided if end >= searched), len(parts))
        found.append(Phrase(text, bisect.bisect_left(ends, searched), completing))
    return found


@dataclass
class LiveRun:
    """One live request as the client saw it: when each token left, when each piece of audio arrived."""

    route: str
    began: float
    sent: list[float] = field(default_factory=list)
    """When each token was sent, then the end of the text."""
    audio: list[tuple[float, int]] = field(default_factory=list)
    """Arrival time and bytes of each audio piece (a WebSocket frame, an HTTP chunk)."""
    phrase_ends: list[int] = field(default_factory=list)
    """Bytes of audio received before each `words` event (WebSocket only)."""
    spoken: list[str] = field(default_factory=list)
    """Each `words` event's words, joined."""
    sample_rate: int = 0
    error: str | None = None

    @property
    def audio_bytes(self) -> int:
        return sum(size for _, size in self.audio)


async def produce(
    run: LiveRun,
    parts: list[str],
    per_second: float,
    send: Callable[[str], Awaitable[None]],
    end: Callable[[], Awaitable[None]],
) -> None:
    """The simulated language model: token i leaves at `began + i / per_second`, then the end of the text."""
    for index, part in enumerate(parts):
        await asyncio.sleep(max(0.0, run.began + index / per_second - time.perf_counter()))
        await send(part)
        run.sent.append(time.perf_counter())
    await end()
    run.sent.append(time.perf_counter())


def _auth(args: argparse.Namespace) -> dict[str, str]:
    return {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}


def _query(args: argparse.Namespace) -> str:
    return urlencode({"language": "en", **({"voice_id": args.voice} if args.voice else {})})


async def over_websocket(url: str, parts: list[str], args: argparse.Namespace) -> LiveRun:
    protocols = [Subprotocol("polytts")]
    if args.api_key:
        protocols.append(Subprotocol("bearer." + base64.urlsafe_b64encode(args.api_key.encode()).decode().rstrip("=")))
    uri = url.replace("http", "ws", 1) + "/tts/live/ws?" + _query(args)
    async with connect(uri, subprotocols=protocols, max_size=None) as ws:
        run = LiveRun("ws", time.perf_counter())
        sender = asyncio.create_task(
            produce(
                run,
                parts,
                args.tokens_per_s,
                lambda t: ws.send(json.dumps({"text": t})),
                lambda: ws.send(json.dumps({"end": True})),
            )
        )
        try:
            async for message in ws:  # ends when the server closes the connection
                now = time.perf_counter()
                if isinstance(message, bytes):
                    run.audio.append((now, len(message)))
                    continue
                event = json.loads(message)
                if event["type"] == "start":
                    run.sample_rate = int(event["sample_rate"])
                elif event["type"] == "words":
                    run.phrase_ends.append(run.audio_bytes)
                    run.spoken.append(" ".join(word["word"] for word in event["words"]))
                elif event["type"] == "error":
                    run.error = f"{event.get('code')}: {event.get('message')}"
                elif event["type"] == "done":
                    break
            await sender
        except (ConnectionClosed, OSError) as exc:
            run.error = run.error or f"{type(exc).__name__}: {exc}"
        finally:
            sender.cancel()
    return run


async def over_http(url: str, parts: list[str], args: argparse.Namespace) -> LiveRun:
    headers = {"Content-Type": "application/x-ndjson", **_auth(args)}
    async with await DuplexRequest.open(url, "POST", "/tts/live?" + _query(args), headers) as request:
        run = LiveRun("http", time.perf_counter())

        def line(text: str) -> Awaitable[None]:
            return request.send((json.dumps({"text": text}) + "\n").encode())

        sender = asyncio.create_task(produce(run, parts, args.tokens_per_s, line, request.end))
        try:
            head = await request.head()
            if head.status != 200:
                run.error = f"{head.status}: {(await request.read())[:300].decode(errors='replace')}"
                return run
            run.sample_rate = int(head.headers["x-sample-rate"])
            async for piece in request.body():
                run.audio.append((time.perf_counter(), len(piece)))
            await sender
        except (asyncio.IncompleteReadError, OSError) as exc:
            run.error = f"{type(exc).__name__}: {exc}"
        finally:
            sender.cancel()
    return run


def _arrival(run: LiveRun, offset: int) -> float | None:
    """When the audio piece holding byte `offset` arrived."""
    position = 0
    for arrived, size in run.audio:
        position += size
        if position > offset:
            return arrived
    return None


def analyse(run: LiveRun, said: list[Phrase], starts: list[int]) -> dict[str, Any]:
    """Per phrase: its delays from its last token, from the token that completed it, and from when the GPU thread
    was free for it (the previous phrase's last audio), to its first audio; and the run's real-time playback."""
    playback = Playback(run.began)
    for arrived, size in run.audio:
        playback.heard(size / 2 / run.sample_rate, arrived)
    rows = []
    for index, (phrase, start) in enumerate(zip(said, starts)):
        first = _arrival(run, start)
        previous_end = _arrival(run, start - 1) if index else None
        completed = run.sent[phrase.completing_token]
        ready = max(completed, previous_end) if previous_end is not None else completed
        rows.append(
            {
                "phrase": index + 1,
                "text": phrase.text,
                "chars": len(phrase.text),
                "after_last_token_s": None if first is None else first - run.sent[phrase.last_token],
                "text_wait_s": completed - run.sent[phrase.last_token],
                "gpu_wait_s": ready - completed,
                "after_ready_s": None if first is None else first - ready,
            }
        )
    total = run.audio[-1][0] - run.began if run.audio else None
    return {"phrases": rows, "playback": playback.public(), "total_s": total, "audio_bytes": run.audio_bytes}


def reference(url: str, texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Each phrase alone as a `/tts/stream` request: its time to first audio (median of runs), and the real-time
    factor of them all."""
    headers = _auth(args)
    with httpx.Client(base_url=url, timeout=600) as client:
        runs = [[measure_stream(client, text, args.voice, headers) for text in texts] for _ in range(args.runs)]
    total = sum(float(r["total_s"]) for run in runs for r in run)
    audio = sum(float(r["audio_s"]) for run in runs for r in run)
    return {
        "ttfa_s": {text: statistics.median(float(run[i]["ttfa_s"]) for run in runs) for i, text in enumerate(texts)},
        "rtf": total / audio if audio else None,
        "cache_hits": sum(r["cache"] == "hit" for run in runs for r in run),
        "runs": runs,
    }


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def live(url: str, args: argparse.Namespace) -> dict[str, Any]:
    parts = tokens(SIXTY_WORDS)
    with httpx.Client(base_url=url, timeout=600) as client:
        measure_stream(client, "Warm up.", args.voice, _auth(args))  # the first call pays for lazy set-up
    runs: dict[str, list[dict[str, Any]]] = {"ws": [], "http": []}
    for _ in range(args.runs):
        ws = asyncio.run(asyncio.wait_for(over_websocket(url, parts, args), args.timeout))
        whole = ws.error is None and " ".join(ws.spoken).split() == SIXTY_WORDS.split()
        said = phrases(parts, ws.spoken, args.first_chunk_chars, args.chunk_chars) if whole else None
        starts = [0, *ws.phrase_ends[:-1]]
        runs["ws"].append(
            {"error": ws.error, "spoken_whole_text": whole, **(analyse(ws, said, starts) if said else {})}
        )
        # The HTTP route has no events: its phrases are the WebSocket run's where its audio is as long (the cuts
        # depend on timing); otherwise only its playback is analysed.
        http = asyncio.run(asyncio.wait_for(over_http(url, parts, args), args.timeout))
        same = http.audio_bytes == ws.audio_bytes
        runs["http"].append(
            {
                "error": http.error,
                "same_audio_length_as_ws": same,
                **(analyse(http, said if same else [], starts) if said and http.error is None else {}),
            }
        )
    texts = sorted(
        {row["text"] for route in runs.values() for run in route for row in run.get("phrases", [])},
        key=SIXTY_WORDS.find,
    )
    ref = reference(url, texts, args)
    out: dict[str, Any] = {
        "text": {"tokens": len(parts), "tokens_per_s": args.tokens_per_s},
        "reference": ref,
        "routes": {route: {"runs": done, "phrases": summarise(done, ref["ttfa_s"])} for route, done in runs.items()},
    }
    return out | verdict(out)


def summarise(runs: list[dict[str, Any]], stream_ttfa: dict[str, float]) -> list[dict[str, Any]]:
    """Per phrase spoken (the cuts may differ run to run), the median over the runs that spoke it of each delay,
    against the phrase's `/tts/stream` time to first audio."""
    by_text: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for spoken in run.get("phrases", []):
            by_text.setdefault(spoken["text"], []).append(spoken)
    rows = []
    for number, text in enumerate(sorted(by_text, key=SIXTY_WORDS.find), 1):
        found = by_text[text]
        row: dict[str, Any] = {"phrase": number, "text": text, "chars": len(text), "runs": len(found)}
        for key in ("after_last_token_s", "text_wait_s", "gpu_wait_s", "after_ready_s"):
            row[key] = _median([r[key] for r in found])
        row["stream_ttfa_s"] = stream_ttfa[text]
        row["excess_s"] = (
            None if row["after_last_token_s"] is None else row["after_last_token_s"] - row["stream_ttfa_s"]
        )
        rows.append(row)
    return rows


def verdict(out: dict[str, Any]) -> dict[str, Any]:
    rows = [row for route in out["routes"].values() for row in route["phrases"]]
    runs = [run for route in out["routes"].values() for run in route["runs"]]
    faster = out["reference"]["rtf"] is not None and out["reference"]["rtf"] < 1
    return {
        "goal": {"excess_at_most_s": GOAL_EXCESS_S, "stalls": "none while generation is faster than real time"},
        "delay_met": bool(rows) and all(r["excess_s"] is not None and r["excess_s"] <= GOAL_EXCESS_S for r in rows),
        "stalls_met": all(run.get("playback", {}).get("stalls") == 0 for run in runs) if faster else None,
        "generation_faster_than_real_time": faster,
    }


def _s(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{value:+.3f}" if signed else f"{value:.3f}"


def summary(fig: dict[str, Any]) -> str:
    return "\n".join(summary_lines(fig))


def summary_lines(fig: dict[str, Any]) -> Iterator[str]:
    ref = fig["reference"]
    yield (
        f"{fig['text']['tokens']} tokens at {fig['text']['tokens_per_s']:g}/s, {len(ref['ttfa_s'])} distinct phrases; "
        f"/tts/stream real-time factor {_s(ref['rtf'])}"
    )
    for route, result in fig["routes"].items():
        done = [run for run in result["runs"] if "playback" in run]
        errors = [run["error"] for run in result["runs"] if run["error"]]
        yield f"live over {route}: {len(done)} of {len(result['runs'])} runs analysed" + (f"; {errors}" * bool(errors))
        for number, run in enumerate(done, 1):
            play = run["playback"]
            yield (
                f"  run {number}: first audio {_s(play['ttfa_s'])} s after the first token, {play['audio_s']:.1f} s "
                f"of audio; stalls {play['stalls']}, {play['underrun_s']:.3f} s in all, "
                f"longest {play['max_stall_s']:.3f} s"
            )
        yield "  #  chars  runs  after last token  text wait  GPU wait  synthesis  /tts/stream ttfa  excess"
        for row in result["phrases"]:
            yield (
                f"  {row['phrase']}  {row['chars']:5d}  {row['runs']:4d}  {_s(row['after_last_token_s']):>16}  "
                f"{_s(row['text_wait_s']):>9}  {_s(row['gpu_wait_s']):>8}  {_s(row['after_ready_s']):>9}  "
                f"{_s(row['stream_ttfa_s']):>16}  {_s(row['excess_s'], True):>6}"
            )
    stalls = {True: "met", False: "not met", None: "not judged (generation slower than real time)"}[fig["stalls_met"]]
    yield (
        f"goal: each phrase within {GOAL_EXCESS_S * 1000:.0f} ms of /tts/stream's first audio: "
        f"{'met' if fig['delay_met'] else 'not met'}; no stalls: {stalls}"
    )


def main() -> int:
    defaults = load_settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches off; default: start one")
    parser.add_argument("--api-key", help="the server's API key, if it has keys")
    parser.add_argument("--voice", help="voice id or built-in name; default: the server's default voice")
    parser.add_argument("--runs", type=int, default=3, help="live requests per route, /tts/stream per phrase")
    parser.add_argument("--tokens-per-s", type=float, default=30.0, help="the simulated model's speed (default 30)")
    parser.add_argument(
        "--first-chunk-chars",
        type=int,
        default=defaults.first_chunk_chars,
        help="the server's POLYTTS_FIRST_CHUNK_CHARS (default: this environment's)",
    )
    parser.add_argument(
        "--chunk-chars",
        type=int,
        default=defaults.chunk_chars,
        help="the server's POLYTTS_CHUNK_CHARS (default: this environment's)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per live request (default 300)")
    return figure_main("live", parser, live, summary)


if __name__ == "__main__":
    sys.exit(main())
