"""Intelligibility benchmark: synthesize English paragraphs, transcribe them with Whisper base, count the errors.

    python bench/intelligibility.py --url URL                  # the server's default voice
    python bench/intelligibility.py --url URL --voice af_heart

Each paragraph goes through the server's `POST /tts` (WAV); Whisper base (bench/asr.py, offline) transcribes it with
word timestamps. Reported per paragraph and overall: the word error rate after normalizing both sides (numbers and
digits compare equal) and the audible breaks inside phrases (a silence of 0.22 s or more between two words with no
punctuation between them). Goal: word error rate at most 0.02 and no breaks. Writes one JSON file (default
`bench/results/intelligibility-<UTC time>.json`).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python bench/intelligibility.py`: the project importable
    sys.path.insert(0, str(ROOT))

from bench.asr import Transcriber, report  # noqa: E402

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


def synthesize(client: httpx.Client, text: str, voice: str | None, language: str) -> tuple[bytes, float]:
    body: dict[str, Any] = {"text": text, "language": language}
    if voice:
        body["voice_id"] = voice
    started = time.perf_counter()
    response = client.post("/tts", json=body)
    response.raise_for_status()
    return response.content, time.perf_counter() - started


def run(url: str, voice: str | None, language: str, paragraphs: dict[str, str]) -> dict[str, Any]:
    transcriber = Transcriber()
    results: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=600) as client:
        for name, text in paragraphs.items():
            wav, synth_s = synthesize(client, text, voice, language)
            started = time.perf_counter()
            transcript = transcriber.transcribe(wav)
            results[name] = {
                **report(text, transcript),
                "audio_s": round(sf.info(io.BytesIO(wav)).duration, 3),
                "synth_s": round(synth_s, 3),
                "transcribe_s": round(time.perf_counter() - started, 3),
            }
            entry = results[name]
            logging.info("%s: WER %.3f (%d/%d), %d break(s)", name, entry["wer"], entry["word_errors"],
                         entry["reference_words"], len(entry["breaks"]))  # fmt: skip
    errors = sum(r["word_errors"] for r in results.values())
    words = sum(r["reference_words"] for r in results.values())
    breaks = sum(len(r["breaks"]) for r in results.values())
    wer = errors / words if words else 0.0
    return {
        "overall": {
            "wer": round(wer, 4),
            "word_errors": errors,
            "reference_words": words,
            "breaks": breaks,
            "goal": {"wer_at_most": WER_GOAL, "breaks": 0},
            "goal_met": wer <= WER_GOAL and breaks == 0,
        },
        "paragraphs": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="a running PolyTTS server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--voice", help="voice for every paragraph; default: the server's default voice")
    parser.add_argument("--language", default="en", help="language sent with each request (default en)")
    parser.add_argument("--only", action="append", choices=sorted(PARAGRAPHS), help="run only these paragraphs")
    parser.add_argument("--out", type=Path, help="JSON path; default bench/results/intelligibility-<UTC>.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    paragraphs = {name: PARAGRAPHS[name] for name in args.only} if args.only else PARAGRAPHS
    started = time.perf_counter()
    result = {
        "benchmark": "intelligibility",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"machine": platform.machine(), "python": platform.python_version()},
        "url": args.url,
        "voice": args.voice or "server default",
        "language": args.language,
        "asr": "Whisper base (faster-whisper, CTranslate2 int8, CPU), beam 5, word timestamps",
        **run(args.url, args.voice, args.language, paragraphs),
    }
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    out = args.out or ROOT / "bench" / "results" / f"intelligibility-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    overall = result["overall"]
    logging.info("overall WER %.4f (%d/%d words), %d break(s) inside phrases; goal %s; written to %s", overall["wer"],
                 overall["word_errors"], overall["reference_words"], overall["breaks"],
                 "met" if overall["goal_met"] else "not met", out)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
