"""Encoding benchmark: what the streaming encoders add to the time to first byte and to the total time.

    python -m bench.encoding                       # both parts; the HTTP part starts server.py (caches off)
    python -m bench.encoding --url URL             # HTTP part against a running server (start it with caches off:
                                                   #   POLYTTS_MEMORY_CACHE_BYTES=0 POLYTTS_PCM_CACHE_BYTES=0)
    python -m bench.encoding --only in-process     # no server: the encoders over Kokoro PCM made in this process

HTTP: `POST /v1/audio/speech` with the 60-word text (bench/common.py SIXTY_WORDS) as `mp3`, `opus` and `pcm` (the
formats interleaved run by run), time to first byte and total time; encoding's cost is each format's median against
`pcm`'s. In-process: the default engine speaks the same text chunk by chunk as the service does, and every format's
encoder is fed those pieces, timed alone: its share of synthesis plus encoding, its cost per second of audio, and the
delay from the first PCM to the first encoded byte. Goal: encoding adds at most 5% to the total time and
at most 50 ms to the first byte. Writes `bench/results/encoding-<UTC time>.json` (or `--out`) and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from audio.encoding import AUDIO_FORMATS, AudioFormat, open_encoder, to_pcm16
from bench.common import (
    SIXTY_WORDS,
    in_process_engine,
    local_server,
    new_report,
    run_main,
    section,
    server_view,
    stats,
)
from settings import load_settings

TEXT = SIXTY_WORDS
HTTP_FORMATS = ("mp3", "opus", "pcm")
GOAL_TOTAL_SHARE = 0.05
GOAL_FIRST_BYTE_S = 0.050


# ---------------------------------------------------------------------------------------------------------------
# HTTP: POST /v1/audio/speech


def speak(client: httpx.Client, fmt: str, voice: str) -> dict[str, Any]:
    body = {"model": "tts-1", "input": TEXT, "voice": voice, "response_format": fmt}
    started = time.perf_counter()
    first = None
    size = 0
    with client.stream("POST", "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - started
            size += len(chunk)
    total = time.perf_counter() - started
    return {
        "ttfb_s": first if first is not None else total,
        "total_s": total,
        "bytes": size,
        "cache": response.headers.get("x-cache", ""),
    }


def bench_http(url: str, runs: int, voice: str, api_key: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    raw: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in HTTP_FORMATS}
    with httpx.Client(base_url=url, timeout=600, headers=headers) as client:
        for fmt in HTTP_FORMATS:
            speak(client, fmt, voice)  # lazy set-up (engine warm-up, codec tables) is not what we measure
        for i in range(runs):
            order = HTTP_FORMATS if i % 2 == 0 else HTTP_FORMATS[::-1]
            for fmt in order:
                raw[fmt].append(speak(client, fmt, voice))
    summary: dict[str, Any] = {}
    pcm_ttfb = stats([r["ttfb_s"] for r in raw["pcm"]])["median"]
    pcm_total = stats([r["total_s"] for r in raw["pcm"]])["median"]
    for fmt, results in raw.items():
        ttfb, total = stats([r["ttfb_s"] for r in results]), stats([r["total_s"] for r in results])
        entry: dict[str, Any] = {
            "ttfb_s": ttfb,
            "total_s": total,
            "bytes": results[-1]["bytes"],
            "cache_hits": sum(r["cache"] == "hit" for r in results),
            "runs": results,
        }
        if fmt != "pcm":
            entry["added_ttfb_s"] = ttfb["median"] - pcm_ttfb
            entry["added_total_share"] = total["median"] / pcm_total - 1
            entry["meets_goal"] = entry["added_ttfb_s"] <= GOAL_FIRST_BYTE_S and (
                entry["added_total_share"] <= GOAL_TOTAL_SHARE
            )
        summary[fmt] = entry
    return {"url": url, "voice": voice, "runs": runs, "formats": summary}


# ---------------------------------------------------------------------------------------------------------------
# In-process: the encoders over real PCM of the default engine


def synthesize(voice_name: str | None) -> dict[str, Any]:
    """The 60-word text through the default engine as the service chunks and joins it: each PCM piece with the time,
    from the start, at which it was ready."""
    with in_process_engine(voice_name) as engine:
        pieces: list[tuple[float, bytes]] = []
        started = time.perf_counter()
        for samples in engine.speak(TEXT):
            pieces.append((time.perf_counter() - started, to_pcm16(samples)))
        return {
            "engine": engine.name,
            "voice": engine.voice,
            "sample_rate": engine.sample_rate,
            "synth_s": time.perf_counter() - started,
            "pieces": pieces,
        }


def encode_timed(fmt: AudioFormat, pieces: list[tuple[float, bytes]], rate: int) -> dict[str, Any]:
    """One response's encoding as the service does it: the encoder opened before the first PCM (its container header
    ready at once), each piece fed in slices (`Encoder.feed_sliced`), then finished; every call timed.

    first_byte_s runs from the first PCM piece to the first encoded audio (past the header): the encoder's time on
    the first slice, plus, should a piece be too short for a codec frame, the wait for the next pieces' synthesis.
    """
    started = time.perf_counter()
    encoder = open_encoder(fmt, rate)
    size = len(encoder.feed(b""))  # the container's header, if any
    open_s = time.perf_counter() - started
    spent = 0.0
    first_byte = None
    for ready_at, pcm in pieces:
        began = time.perf_counter()
        for out in encoder.feed_sliced(pcm):
            if first_byte is None:
                first_byte = (ready_at - pieces[0][0]) + spent + time.perf_counter() - began
            size += len(out)
        spent += time.perf_counter() - began
    began = time.perf_counter()
    size += len(encoder.finish())
    spent += time.perf_counter() - began
    return {"open_s": open_s, "encode_s": open_s + spent, "first_byte_s": first_byte or spent, "bytes": size}


def bench_in_process(voice: str | None, runs: int) -> dict[str, Any]:
    speech = synthesize(voice)
    pieces, rate = speech["pieces"], speech["sample_rate"]
    audio_s = sum(len(pcm) for _, pcm in pieces) / 2 / rate
    formats: dict[str, Any] = {}
    for fmt in AUDIO_FORMATS:
        encode_timed(fmt, pieces, rate)  # first use loads the codec's tables
        results = [encode_timed(fmt, pieces, rate) for _ in range(runs)]
        encode_s = stats([r["encode_s"] for r in results])
        first_byte = stats([r["first_byte_s"] for r in results])
        open_s = stats([r["open_s"] for r in results])
        share = encode_s["median"] / (speech["synth_s"] + encode_s["median"])
        formats[fmt] = {
            "encode_s": encode_s,
            "open_s": open_s,
            "encode_s_per_audio_s": encode_s["median"] / audio_s,
            "share_of_total": share,
            "first_byte_delay_s": first_byte,
            "bytes": results[-1]["bytes"],
            "kbit_per_s": results[-1]["bytes"] * 8 / audio_s / 1000,
            "meets_goal": share <= GOAL_TOTAL_SHARE and first_byte["median"] <= GOAL_FIRST_BYTE_S,
        }
    return {
        "engine": speech["engine"],
        "voice": speech["voice"],
        "sample_rate": rate,
        "audio_s": audio_s,
        "synth_s": speech["synth_s"],
        "first_pcm_s": pieces[0][0],
        "pieces": len(pieces),
        "piece_s": [round(len(pcm) / 2 / rate, 3) for _, pcm in pieces],
        "runs": runs,
        "how": "synth_s: the text spoken once, chunk by chunk; encode_s: each format's encoder fed those pieces in "
        "slices (open + feeds + finish), median of runs; share_of_total: encode_s / (synth_s + encode_s), encoding "
        "serial with synthesis (the worst case; a pipelined encoder adds only its last piece and finish); "
        "first_byte_delay_s: from the first PCM piece to the first encoded audio, the encoder opened and its "
        "header sent beforehand (open_s)",
        "formats": formats,
    }


# ---------------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = new_report("encoding", args)
    report["goal"] = {"added_total_share": GOAL_TOTAL_SHARE, "added_first_byte_s": GOAL_FIRST_BYTE_S}
    report["words"] = len(TEXT.split())
    if args.only != "http":
        section(report, "in_process", lambda: bench_in_process(args.voice, args.runs))
    if args.only != "in-process":
        with contextlib.ExitStack() as stack:
            url = args.url or stack.enter_context(local_server()).url
            report["server"] = server_view(url)
            voice = args.voice or load_settings().default_voice
            section(report, "http", lambda: bench_http(url, args.runs, voice, args.api_key))
    return report


def summary_lines(report: dict[str, Any]) -> Iterator[str]:
    for part, result in report["figures"].items():
        if "error" in result:
            yield f"{part} failed: {result['error']}"
        elif part == "in_process":
            yield f"in-process: {result['engine']} {result['audio_s']:.2f}s of audio in {result['synth_s']:.2f}s"
            for fmt, r in result["formats"].items():
                ms = {key: r[key]["median"] * 1000 for key in ("encode_s", "open_s", "first_byte_delay_s")}
                yield (
                    f"  {fmt:>4}: encode {ms['encode_s']:7.1f} ms ({r['encode_s_per_audio_s'] * 1000:5.2f} ms per "
                    f"audio s, {r['share_of_total']:.2%} of total; open {ms['open_s']:4.1f} ms)  "
                    f"first audio +{ms['first_byte_delay_s']:5.1f} ms  {r['kbit_per_s']:6.1f} kbit/s"
                )
        else:
            yield f"http {result['url']}:"
            for fmt, r in result["formats"].items():
                added = f"  (+{r['added_ttfb_s'] * 1000:.0f} ms, {r['added_total_share']:+.1%})" if fmt != "pcm" else ""
                yield f"  {fmt:>4}: ttfb {r['ttfb_s']['median']:.3f}s  total {r['total_s']['median']:.3f}s{added}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (caches off) for the HTTP part; default: start one")
    parser.add_argument("--only", choices=("http", "in-process"), help="run one part only")
    parser.add_argument("--runs", type=int, default=5, help="HTTP requests per format, encodings per format")
    parser.add_argument("--voice", help="a built-in voice (over HTTP, any voice); default: POLYTTS_DEFAULT_VOICE's")
    parser.add_argument("--api-key", help="sent as Authorization: Bearer")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    return run_main("encoding", lambda: run(args), args.out, lambda report: "\n".join(summary_lines(report)))


if __name__ == "__main__":
    sys.exit(main())
