"""Intelligibility benchmark: synthesize English paragraphs, transcribe them with Whisper base, count the errors.

    python -m bench.intelligibility                            # starts server.py (caches off); its default voice
    python -m bench.intelligibility --url URL --voice af_heart
    python -m bench.intelligibility --only money --only dates  # some paragraphs only
    python -m bench.intelligibility --route stream             # through /tts/stream, read at once: short steps
    python -m bench.intelligibility --route stream --word-cuts      # ... cut inside long clauses too

Each paragraph goes through the server's `POST /tts` (WAV), or with `--route stream` through `POST /tts/stream` (PCM)
read as fast as it comes, so that every step after the first is a short step cut where the text allows it (inside a
long clause at a word gap too where `--word-cuts` starts the server with POLYTTS_SHORT_STEP_WORD_CUTS=1): the seams
of short steps heard. Whisper base (bench/asr.py, offline) transcribes it with
word timestamps. Reported per paragraph and overall: the word error rate after normalizing both sides (numbers and
digits compare equal) and the audible breaks inside phrases (a silence of 0.22 s or more between two words with no
punctuation between them, located by Whisper and confirmed by a silence in the audio; the gaps only Whisper's word
times show are counted apart as `unconfirmed`). Goal: word error rate at most 0.02 and no breaks. Writes
`bench/results/intelligibility-<UTC time>.json` (or `--out`) and prints a table.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from typing import Any

import httpx
import numpy as np
import soundfile as sf

from bench.asr import Transcriber, report
from bench.common import figure_main

WER_GOAL = 0.02
PARAGRAPHS = {
    "kitchen": (
        "When the morning light finally reached the old farmhouse on the hill, the children ran down to the "
        "kitchen and found the recipe cards on the top shelf, each card written in their grandmother's careful "
        "hand. They baked bread until noon."
    ),
    "money": (
        "Dr. Smith paid $4.50 for a coffee and $12.99 for a sandwich at the station on Elm St. before the 7:45 am "
        "train. By the end of the month, he had spent more than $300 on breakfast alone, about 15% of his budget."
    ),
    "dates": (
        "The museum opened on March 3, 2024, almost 120 years after the first plans were drawn in 1905. Its new "
        "wing, finished on 2025-06-21, holds 1,250 paintings and 42 sculptures from the 1920s."
    ),
    "abbreviations": (
        "Mr. and Mrs. Jones moved from St. Louis to a small town in the U.S. Northwest in the spring. They packed "
        "books, lamps, dishes, etc. The heavy boxes, e.g. the ones with books, went first, and the truck left at "
        "6 p.m. on Friday."
    ),
    "measures": (
        "The trail climbs 850 m over 12 km, so most hikers carry at least 2 liters of water and start before dawn "
        "when it is still 55°F. The record, set by a runner from Denver, is 1 hour and 48 minutes."
    ),
    "contact": (
        "If the package has not arrived within 5 business days, call our support line at 555-201-4477 or write to "
        "help@example.com, and mention your order number, which is printed on the 3rd line of the receipt."
    ),
}


def synthesize(
    client: httpx.Client, text: str, voice: str | None, language: str, route: str = "tts"
) -> tuple[bytes, float]:
    """The paragraph as WAV, and the seconds it took: from `/tts`, or from `/tts/stream` read as it comes."""
    body: dict[str, Any] = {"text": text, "language": language, **({"voice_id": voice} if voice else {})}
    started = time.perf_counter()
    if route == "tts":
        response = client.post("/tts", json=body)
        response.raise_for_status()
        return response.content, time.perf_counter() - started
    with client.stream("POST", "/tts/stream", json=body) as streamed:
        streamed.raise_for_status()
        rate = int(streamed.headers["x-sample-rate"])
        pcm = b"".join(streamed.iter_bytes())
    elapsed = time.perf_counter() - started
    wav = io.BytesIO()
    sf.write(wav, np.frombuffer(pcm, dtype="<i2"), rate, format="WAV", subtype="PCM_16")
    return wav.getvalue(), elapsed


def intelligibility(url: str, args: argparse.Namespace) -> dict[str, Any]:
    paragraphs = {name: PARAGRAPHS[name] for name in args.only} if args.only else PARAGRAPHS
    transcriber = Transcriber()
    results: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=600) as client:
        for name, text in paragraphs.items():
            wav, synth_s = synthesize(client, text, args.voice, args.language, args.route)
            samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
            started = time.perf_counter()
            transcript = transcriber.transcribe(wav)
            results[name] = {
                **report(text, transcript, samples, rate),
                "audio_s": round(len(samples) / rate, 3),
                "synth_s": round(synth_s, 3),
                "transcribe_s": round(time.perf_counter() - started, 3),
            }
            sys.stderr.write(f"[intelligibility] {name}: WER {results[name]['wer']:.3f}\n")
    errors = sum(r["word_errors"] for r in results.values())
    words = sum(r["reference_words"] for r in results.values())
    breaks = sum(len(r["breaks"]) for r in results.values())
    unconfirmed = sum(len(r["unconfirmed_breaks"]) for r in results.values())
    wer = errors / words if words else 0.0
    return {
        "goal": {"wer_at_most": WER_GOAL, "breaks": 0},
        "met": wer <= WER_GOAL and breaks == 0,
        "overall": {
            "wer": round(wer, 4),
            "word_errors": errors,
            "reference_words": words,
            "breaks": breaks,
            "unconfirmed_breaks": unconfirmed,
        },
        "setup": {
            "voice": args.voice or "server default",
            "language": args.language,
            "route": args.route,
            "word_cuts": args.word_cuts,
            "asr": "Whisper base (faster-whisper, CTranslate2 int8, CPU), beam 5, word timestamps",
        },
        "paragraphs": results,
    }


def summary(fig: dict[str, Any]) -> str:
    lines = [f"{'paragraph':<14} {'WER':>6} {'errors':>9} {'breaks':>6} {'unconfirmed':>11} {'audio s':>8}"]
    for name, r in fig["paragraphs"].items():
        errors = f"{r['word_errors']}/{r['reference_words']}"
        lines.append(
            f"{name:<14} {r['wer']:6.3f} {errors:>9} {len(r['breaks']):6d} {len(r['unconfirmed_breaks']):11d} {r['audio_s']:8.2f}"
        )
    overall = fig["overall"]
    lines.append(
        f"{'overall':<14} {overall['wer']:6.3f} {overall['word_errors']:>4}/{overall['reference_words']:<4} "
        f"{overall['breaks']:6d} {overall['unconfirmed_breaks']:11d}   goal WER <= {WER_GOAL} and no breaks: {'met' if fig['met'] else 'not met'}"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (caches off); default: start one")
    parser.add_argument("--voice", help="voice for every paragraph; default: the server's default voice")
    parser.add_argument("--language", default="en", help="language sent with each request (default en)")
    parser.add_argument("--only", action="append", choices=sorted(PARAGRAPHS), help="run only these paragraphs")
    parser.add_argument("--route", choices=("tts", "stream"), default="tts", help="/tts (default) or /tts/stream")
    parser.add_argument(
        "--word-cuts", action="store_true", help="own server: short steps cut inside long clauses too (word cuts on)"
    )
    return figure_main(
        "intelligibility",
        parser,
        intelligibility,
        summary,
        lambda args: {"POLYTTS_SHORT_STEP_WORD_CUTS": "1"} if args.word_cuts else {},
    )


if __name__ == "__main__":
    sys.exit(main())
