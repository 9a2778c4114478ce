"""The compatible fronts keep the live route's latency: the same simulated language model over `/tts/live/ws`, over
the ElevenLabs `multi-stream-input` WebSocket, over the Cartesia `tts/websocket` and over the Deepgram `v1/speak`
WebSocket.

    python -m bench.fronts                        # starts server.py (caches off); 3 runs per route
    python -m bench.fronts --url URL --api-key KEY --runs 1 --tokens-per-s 50

The text (bench/common.py SIXTY_WORDS) is cut into tokens and sent at `--tokens-per-s` (30) as bench/live.py does:
natively as `{"text": token}` then `{"end": true}`; to the ElevenLabs front as `{"text": token, "context_id"}` after
the context's `{"text": " "}`, then a flush and `close_context` (Pipecat's end of a turn), audio asked as
`pcm_24000` (the engine's rate: no resampling) unless `--output-format` says otherwise; to the Cartesia front as
`{"transcript": token, "continue": true, "context_id"}` with `add_timestamps`, then `{"transcript": "", "continue":
false}`, raw s16le at the same rate; to the Deepgram front as `{"type": "Speak", "text": token}` then a `Flush`,
linear16 at the same rate, with `word_timestamps`. The runs alternate.

A phrase is what the server spoke as one chunk (native: a `words` event; ElevenLabs: a message with its
`alignment`; Cartesia: a `timestamps` event; Deepgram: a `Words` message); its delay is from the arrival of its last token to its first audio
(bench/live.py `analyse`). A first round over every route is not counted (`--warmup-rounds`: the node's first live
requests pay for lazy set-up, and the route that came first paid for it alone). Reported per phrase: the median delay
of each route and each front's excess over the native route, and the best run's (the least disturbed by the host);
per run, the stalls of a client playing from the first byte in real time. Goals: each phrase within 50 ms of the
native route's; no stall at 30 tokens/s while generation is faster than real time. Writes
`bench/results/fronts-<UTC time>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import time
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from bench.common import SIXTY_WORDS, figure_main, measure_stream
from bench.live import LiveRun, analyse, over_websocket, phrases, produce, tokens
from settings import load_settings

GOAL_EXCESS_S = 0.05
CONTEXT = "bench"


async def over_elevenlabs(url: str, parts: list[str], args: argparse.Namespace) -> LiveRun:
    """One context on the ElevenLabs `multi-stream-input` WebSocket, fed as an agent framework feeds it."""
    query = f"output_format={args.output_format}&language_code=en"
    uri = f"{url.replace('http', 'ws', 1)}/elevenlabs/v1/text-to-speech/{args.voice}/multi-stream-input?{query}"
    headers = {"xi-api-key": args.api_key} if args.api_key else {}
    async with connect(uri, additional_headers=headers, max_size=None) as ws:
        run = LiveRun("elevenlabs", time.perf_counter(), sample_rate=int(args.output_format.split("_")[1]))
        await ws.send(json.dumps({"text": " ", "context_id": CONTEXT}))

        async def end() -> None:
            await ws.send(json.dumps({"context_id": CONTEXT, "flush": True}))
            await ws.send(json.dumps({"context_id": CONTEXT, "close_context": True}))

        sender = asyncio.create_task(
            produce(
                run,
                parts,
                args.tokens_per_s,
                lambda t: ws.send(json.dumps({"text": t, "context_id": CONTEXT})),
                end,
            )
        )
        try:
            async for message in ws:
                now = time.perf_counter()
                event = json.loads(message)
                if event.get("audio"):
                    run.audio.append((now, len(base64.b64decode(event["audio"]))))
                if event.get("alignment"):
                    run.phrase_ends.append(run.audio_bytes)
                    run.spoken.append("".join(event["alignment"]["chars"]).strip())
                if event.get("error"):
                    run.error = f"{event['error']}: {event.get('message')}"
                if event.get("isFinal"):
                    break
            await sender
            await ws.send(json.dumps({"close_socket": True}))
        except (ConnectionClosed, OSError) as exc:
            run.error = run.error or f"{type(exc).__name__}: {exc}"
        finally:
            sender.cancel()
    return run


async def over_cartesia(url: str, parts: list[str], args: argparse.Namespace) -> LiveRun:
    """One context on the Cartesia `tts/websocket`, fed as Pipecat's and LiveKit's services feed it."""
    rate = int(args.output_format.split("_")[1])
    query = f"?api_key={args.api_key}" if args.api_key else ""
    fields = {
        "model_id": "sonic-3",
        "voice": {"mode": "id", "id": args.voice},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": rate},
        "language": "en",
        "add_timestamps": True,
        "context_id": CONTEXT,
    }
    async with connect(f"{url.replace('http', 'ws', 1)}/cartesia/tts/websocket{query}", max_size=None) as ws:
        run = LiveRun("cartesia", time.perf_counter(), sample_rate=rate)

        async def send(text: str, more: bool) -> None:
            await ws.send(json.dumps({**fields, "transcript": text, "continue": more}))

        sender = asyncio.create_task(
            produce(run, parts, args.tokens_per_s, lambda t: send(t, True), lambda: send("", False))
        )
        try:
            async for message in ws:
                now = time.perf_counter()
                event = json.loads(message)
                if event["type"] == "chunk":
                    run.audio.append((now, len(base64.b64decode(event["data"]))))
                elif event["type"] == "timestamps":
                    run.phrase_ends.append(run.audio_bytes)
                    run.spoken.append(" ".join(event["word_timestamps"]["words"]))
                elif event["type"] == "error":
                    run.error = f"{event['error_code']}: {event['message']}"
                if event["type"] in ("done", "error"):
                    break
            await sender
        except (ConnectionClosed, OSError) as exc:
            run.error = run.error or f"{type(exc).__name__}: {exc}"
        finally:
            sender.cancel()
    return run


async def over_deepgram(url: str, parts: list[str], args: argparse.Namespace) -> LiveRun:
    """The Deepgram `v1/speak` WebSocket, fed as Pipecat's DeepgramTTSService feeds it (`Speak` per token, `Flush` at
    the end of the answer); `word_timestamps` (this node's own) marks the phrases."""
    rate = int(args.output_format.split("_")[1])
    query = f"model={args.voice}&encoding=linear16&sample_rate={rate}&word_timestamps=true"
    headers = {"Authorization": f"Token {args.api_key}"} if args.api_key else {}
    async with connect(f"{url.replace('http', 'ws', 1)}/deepgram/v1/speak?{query}", additional_headers=headers) as ws:
        run = LiveRun("deepgram", time.perf_counter(), sample_rate=rate)
        sender = asyncio.create_task(
            produce(
                run,
                parts,
                args.tokens_per_s,
                lambda t: ws.send(json.dumps({"type": "Speak", "text": t})),
                lambda: ws.send(json.dumps({"type": "Flush"})),
            )
        )
        try:
            async for message in ws:
                now = time.perf_counter()
                if isinstance(message, bytes):
                    run.audio.append((now, len(message)))
                    continue
                event = json.loads(message)
                if event["type"] == "Words":
                    run.phrase_ends.append(run.audio_bytes)
                    run.spoken.append(" ".join(word["word"] for word in event["words"]))
                elif event["type"] in ("Error", "Warning"):
                    run.error = f"{event.get('err_code') or event.get('warn_code')}: {event.get('description')}"
                if event["type"] in ("Flushed", "Error"):
                    break
            await sender
            await ws.send(json.dumps({"type": "Close"}))
        except (ConnectionClosed, OSError) as exc:
            run.error = run.error or f"{type(exc).__name__}: {exc}"
        finally:
            sender.cancel()
    return run


FRONTS = {"elevenlabs": over_elevenlabs, "cartesia": over_cartesia, "deepgram": over_deepgram}


def _analysed(run: LiveRun, parts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    whole = run.error is None and " ".join(run.spoken).split() == SIXTY_WORDS.split()
    if not whole:
        return {"error": run.error, "spoken_whole_text": False}
    said = phrases(parts, run.spoken, args.first_chunk_chars, args.chunk_chars)
    return {"error": None, "spoken_whole_text": True, **analyse(run, said, [0, *run.phrase_ends[:-1]])}


def fronts(url: str, args: argparse.Namespace) -> dict[str, Any]:
    parts = tokens(SIXTY_WORDS)
    auth = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    with httpx.Client(base_url=url, timeout=600) as client:
        rtf_run = measure_stream(client, SIXTY_WORDS, args.voice, auth)  # warms up, and tells generation's pace
    runs: dict[str, list[dict[str, Any]]] = {"native": [], **{front: [] for front in FRONTS}}
    for _ in range(args.warmup_rounds):  # every route once, not counted: the first round pays for lazy set-up
        asyncio.run(asyncio.wait_for(over_websocket(url, parts, args), args.timeout))
        for over in FRONTS.values():
            asyncio.run(asyncio.wait_for(over(url, parts, args), args.timeout))
    for _ in range(args.runs):
        native = asyncio.run(asyncio.wait_for(over_websocket(url, parts, args), args.timeout))
        runs["native"].append(_analysed(native, parts, args))
        for front, over in FRONTS.items():
            runs[front].append(
                _analysed(asyncio.run(asyncio.wait_for(over(url, parts, args), args.timeout)), parts, args)
            )
    delays: dict[str, dict[str, list[float]]] = {route: {} for route in runs}
    for route, done in runs.items():
        for run in done:
            for row in run.get("phrases", []):
                if row["after_last_token_s"] is not None:
                    delays[route].setdefault(row["text"], []).append(row["after_last_token_s"])
    rows: list[dict[str, Any]] = []
    for text in sorted(set.intersection(*(set(found) for found in delays.values())), key=SIXTY_WORDS.find):
        medians = {route: statistics.median(found[text]) for route, found in delays.items()}  # each has `text`
        best = {route: min(found[text]) for route, found in delays.items()}
        excess = {front: medians[front] - medians["native"] for front in FRONTS}
        rows.append(
            {
                "text": text,
                **{f"{route}_s": value for route, value in medians.items()},
                "excess_s": excess,
                "best_s": best,
                "best_excess_s": {front: best[front] - best["native"] for front in FRONTS},
            }
        )
    rtf = float(rtf_run["total_s"]) / float(rtf_run["audio_s"]) if rtf_run.get("audio_s") else None
    faster = rtf is not None and rtf < 1
    front_runs = [run for front in FRONTS for run in runs[front] if "playback" in run]
    out: dict[str, Any] = {
        "text": {"tokens": len(parts), "tokens_per_s": args.tokens_per_s, "output_format": args.output_format},
        "stream_rtf": rtf,
        "routes": runs,
        "phrases": rows,
        "goal": {"excess_at_most_s": GOAL_EXCESS_S, "stalls": "none while generation is faster than real time"},
        "delay_met": bool(rows) and all(excess <= GOAL_EXCESS_S for row in rows for excess in row["excess_s"].values()),
        "stalls_met": all(run["playback"]["stalls"] == 0 for run in front_runs) if faster and front_runs else None,
    }
    out["failed"] = [] if out["delay_met"] and out["stalls_met"] is not False else ["fronts"]
    return out


def summary(fig: dict[str, Any]) -> str:
    lines = [
        f"{fig['text']['tokens']} tokens at {fig['text']['tokens_per_s']:g}/s; /tts/stream real-time factor "
        f"{fig['stream_rtf']:.3f}"
        if fig["stream_rtf"] is not None
        else "no real-time factor",
        "  phrase                                      native" + "".join(f"  {front:>10}  excess" for front in FRONTS),
    ]
    for row in fig["phrases"]:
        excess = row["excess_s"]
        lines.append(
            f"  {row['text'][:42]:42}  {row['native_s']:6.3f}"
            + "".join(f"  {row[f'{front}_s']:10.3f}  {excess[front]:+.3f}" for front in FRONTS)
        )
    for route, done in fig["routes"].items():
        for number, run in enumerate(done, 1):
            play = run.get("playback")
            state = f"stalls {play['stalls']}, {play['underrun_s']:.3f} s" if play else f"not analysed: {run['error']}"
            lines.append(f"  {route} run {number}: {state}")
    stalls = {True: "met", False: "not met", None: "not judged"}[fig["stalls_met"]]
    lines.append(
        f"goal: within {GOAL_EXCESS_S * 1000:.0f} ms of /tts/live/ws: {'met' if fig['delay_met'] else 'not met'}; "
        f"no stalls: {stalls}"
    )
    return "\n".join(lines)


def main() -> int:
    defaults = load_settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server with caches off; default: start one")
    parser.add_argument("--api-key", help="the server's API key, if it has keys")
    parser.add_argument("--voice", default="af_heart", help="voice id or built-in name (default af_heart)")
    parser.add_argument(
        "--output-format", default="pcm_24000", help="the ElevenLabs front's output_format (its rate: Cartesia's)"
    )
    parser.add_argument("--runs", type=int, default=3, help="live requests per route")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="rounds over every route first, not counted (default 1)"
    )
    parser.add_argument("--tokens-per-s", type=float, default=30.0, help="the simulated model's speed (default 30)")
    parser.add_argument("--first-chunk-chars", type=int, default=defaults.first_chunk_chars)
    parser.add_argument("--chunk-chars", type=int, default=defaults.chunk_chars)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per live request (default 300)")
    return figure_main("fronts", parser, fronts, summary)


if __name__ == "__main__":
    sys.exit(main())
