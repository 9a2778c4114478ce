"""Lexicon benchmark: what applying pronunciation lexicons adds to planning a request, in this process.

    python -m bench.lexicon                  # 10,000-entry lexicons on a 1,000-character request
    python -m bench.lexicon --entries 50000 --lexicons 2

Builds `--lexicons` lexicons of `--entries` entries each (single words and two-word graphemes, aliases and phonemes
alike), then pronounces a request of `--chars` characters (about one word in ten a lexicon's) as the planner does
(`lifecycle.pronunciation.Pronouncer.spoken`, on the Kokoro engine's own normalization), with and without them,
interleaved. The figure is the median difference: what the lexicons add. A matcher is built once per set of lexicons
and kept (its build time is reported apart: it is paid on the first request only). Goal: under 5 ms. Writes
`bench/results/lexicon-<UTC time>.json` (or `--out`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import new_report, run_main, section, stats
from engines import FAMILIES
from engines.base import SynthesisOptions
from lexicons.lexicon import Lexeme, Lexicon
from lifecycle.pronunciation import Pronouncer
from settings import load_settings
from text.languages import resolve_language

GOAL_MS = 5.0
_FILLER = "the quick brown fox jumps over a lazy dog and then it runs back home".split()


def lexicons(count: int, entries: int) -> list[Lexicon]:
    built = []
    for n in range(count):
        lexemes = []
        for i in range(entries):
            grapheme = f"brand{n}x{i}" if i % 2 else f"Acme{n}x{i} Corp"
            said = (
                Lexeme((grapheme,), alias=f"acme {_FILLER[i % len(_FILLER)]}")
                if i % 3
                else Lexeme((grapheme,), phonemes="ˈækmi")
            )
            lexemes.append(said)
        built.append(Lexicon(f"bench{n}", "en-US", tuple(lexemes)))
    return built


def request_text(chars: int, entries: int) -> str:
    words: list[str] = []
    i = 0
    while len(" ".join(words)) < chars:
        words.append(f"brand0x{(7 * i) % entries | 1}" if i % 10 == 0 else _FILLER[i % len(_FILLER)])
        i += 1
    return (" ".join(words)[:chars].rsplit(" ", 1)[0]) + "."


def measure(args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings()
    spec = FAMILIES["kokoro"]
    engine = spec.build(spec.own_settings(settings), settings.engine_context())
    assert engine is not None, "Kokoro is not built on this node"
    options = SynthesisOptions(language=resolve_language("en"), params={})
    pronouncer = Pronouncer()
    sets = lexicons(args.lexicons, args.entries)
    text = request_text(args.chars, args.entries)
    started = time.perf_counter()
    pronouncer.matchers.get(sets, options.language.code)
    build_s = time.perf_counter() - started
    with_ms: list[float] = []
    without_ms: list[float] = []
    matched = pronouncer.spoken(text, sets, engine, options)
    for _ in range(args.runs):
        for chosen, times in ((sets, with_ms), ([], without_ms)):
            started = time.perf_counter()
            pronouncer.spoken(text, chosen, engine, options)
            times.append(1000 * (time.perf_counter() - started))
    added = statistics.median(with_ms) - statistics.median(without_ms)
    return {
        "entries_per_lexicon": args.entries,
        "lexicons": args.lexicons,
        "request_chars": len(text),
        "matches": len(pronouncer.matchers.get(sets, options.language.code).matches(text)),
        "spoken_chars": len(matched.text),
        "matcher_build_s": build_s,
        "with_lexicons_ms": stats(with_ms),
        "without_lexicons_ms": stats(without_ms),
        "added_ms": added,
        "goal_ms": GOAL_MS,
        "failed": [] if added < GOAL_MS else ["lexicon"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000, help="entries per lexicon (default 10000)")
    parser.add_argument("--lexicons", type=int, default=1, help="lexicons applied (default 1)")
    parser.add_argument("--chars", type=int, default=1000, help="characters of the request (default 1000)")
    parser.add_argument("--runs", type=int, default=50, help="timed runs of each (default 50)")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()

    def run() -> dict[str, Any]:
        report = new_report("lexicon", args)
        section(report, "lexicon", lambda: measure(args))
        figure = report["figures"]["lexicon"]
        report["failed"] = ["lexicon"] if "error" in figure else figure["failed"]
        return report

    def summary(report: dict[str, Any]) -> str:
        figure = report["figures"]["lexicon"]
        if "error" in figure:
            return f"lexicon failed: {figure['error']}"
        return (
            f"{figure['lexicons']} x {figure['entries_per_lexicon']} entries on {figure['request_chars']} chars "
            f"({figure['matches']} matches): +{figure['added_ms']:.2f} ms (goal < {GOAL_MS} ms); matcher built in "
            f"{figure['matcher_build_s']:.2f} s"
        )

    return run_main("lexicon", run, args.out, summary)


if __name__ == "__main__":
    sys.exit(main())
