"""Probes of text whose work is out of proportion to its length as written: money read out as words, a script the
voice's language cannot read (once spelled out letter by letter), and a newcomer waiting behind steps that are long
as spoken."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from bench.abuse.probing import Answer, Target, code_of, expect

MONEY = "$999,999,999,999.99 "
MONEY_TEXT = MONEY * 250
"""5,000 characters as written; 38,749 as spoken ("nine hundred ninety-nine billion, ...")."""
HEBREW_TEXT = ("שלום עולם ומלואו " * 300)[:5000]
MIXED_TEXT = "The word for peace is written like this: " + HEBREW_TEXT[:200]
SHORT = "Hello there."
RATE = 24_000
"""Kokoro's sample rate: the probes ask for the default voice, af_heart."""
READ_FOR_S = 30.0
"""How long a probe reads an answer that should have been refused before it gives up on it."""
STEP_S = 2.9
"""One 120-character step on the 2-core development machine (docs/scheduling.md): the wait a newcomer may see."""


@dataclass
class Streamed:
    status: int
    code: str = ""
    message: str = ""
    audio_s: float = 0.0
    first_audio_s: float | None = None
    complete: bool = False


def stream(
    target: Target,
    text: str,
    key: str,
    read_for: float = READ_FOR_S,
    playing: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> Streamed:
    """A /tts/stream of `text` (raw PCM) under fairness key `key`, read for at most `read_for` seconds or until `stop`
    is set; `playing` is set at its first audio."""
    started = time.perf_counter()
    body = {"text": text, "voice": "af_heart", "format": "pcm"}
    with (
        target.client() as client,
        client.stream("POST", "/tts/stream", json=body, headers={"X-Fairness-Key": key}) as answer,
    ):
        if answer.status_code != 200:
            answer.read()
            message = str(answer.json().get("message", "")) if answer.content.startswith(b"{") else ""
            return Streamed(answer.status_code, code_of(answer), message)
        seen = Streamed(200)
        received = 0
        for piece in answer.iter_raw():
            if seen.first_audio_s is None and piece:
                seen.first_audio_s = time.perf_counter() - started
                if playing is not None:
                    playing.set()
            received += len(piece)
            if time.perf_counter() - started > read_for or (stop is not None and stop.is_set()):
                break
        else:
            seen.complete = True
        seen.audio_s = received / 2 / RATE
        return seen


def refused(seen: Streamed, status: int, code: str, elapsed: float) -> Answer:
    got = f"{seen.status} {seen.code}".strip()
    if seen.status == 200:
        still = "complete" if seen.complete else "still streaming"
        expect(False, f"200: {seen.audio_s:.0f} s of audio in {elapsed:.0f} s, {still}")
    expect(seen.status == status and seen.code == code, f"{got}, not {status} {code}")
    return Answer(got, seen.message[:160])


def refused_text(target: Target, text: str, key: str, status: int, code: str, named: str) -> Answer:
    """`text` streamed: refused at once with `status` and `code`, its message naming `named`."""
    started = time.perf_counter()
    seen = stream(target, text, key)
    answer = refused(seen, status, code, time.perf_counter() - started)
    expect(named in seen.message, f"the message does not name {named}: {seen.message!r}")
    return answer


def money_text(target: Target) -> Answer:
    """5,000 characters of money amounts: bounded by what they are spoken as, a 413 naming the limit."""
    return refused_text(target, MONEY_TEXT, "text-work-money", 413, "spoken_too_long", "POLYTTS_MAX_SPOKEN_CHARS")


def hebrew_text(target: Target) -> Answer:
    """5,000 Hebrew characters through an English voice: nothing it can read, a 422 naming the script."""
    return refused_text(target, HEBREW_TEXT, "text-work-hebrew", 422, "unreadable_text", "Hebrew")


def mixed_text(target: Target) -> Answer:
    """An English sentence and 200 Hebrew characters through an English voice: the English is spoken, the Hebrew
    skipped (spelled out, 200 characters were 70 s of audio)."""
    started = time.perf_counter()
    seen = stream(target, MIXED_TEXT, "text-work-mixed", read_for=4 * READ_FOR_S)
    expect(seen.status == 200, f"{seen.status} {seen.code}")
    expect(
        seen.complete and seen.audio_s < 10, f"{seen.audio_s:.0f} s of audio in {time.perf_counter() - started:.0f} s"
    )
    return Answer("200", f"{seen.audio_s:.1f} s of audio for 41 English and 200 Hebrew characters")


def newcomer(target: Target) -> Answer:
    """A short stream from another fairness key, 1 s after a stream of money amounts (60 of them: within the limit)
    began to play: its first audio waits at most about one step."""
    # Two texts of one length: the second must not be a cache hit of the first.
    alone = stream(target, f"{SHORT} One.", "text-work-new")
    expect(alone.status == 200 and alone.first_audio_s is not None, f"alone: {alone.status} {alone.code}")
    assert alone.first_audio_s is not None
    playing, stop = threading.Event(), threading.Event()
    long: dict[str, Streamed] = {}
    runner = threading.Thread(
        target=lambda: long.update(seen=stream(target, MONEY * 60, "text-work-long", 600, playing, stop))
    )
    runner.start()
    try:
        expect(playing.wait(120), "the money stream gave no audio in 120 s")
        time.sleep(1.0)
        after = stream(target, f"{SHORT} Two.", "text-work-new")
    finally:
        stop.set()
        runner.join(120)
    first = long.get("seen")
    expect(first is not None and first.status == 200, f"the money stream: {first.status if first else 'no answer'}")
    expect(after.status == 200 and after.first_audio_s is not None, f"the newcomer: {after.status} {after.code}")
    assert after.first_audio_s is not None
    waited = after.first_audio_s - alone.first_audio_s
    detail = f"first audio {after.first_audio_s:.2f} s (alone {alone.first_audio_s:.2f} s): waited {waited:.2f} s"
    expect(waited < 2 * STEP_S, detail + f", over twice one step ({STEP_S} s)")
    return Answer("200", detail)


def probes(target: Target, own: bool) -> None:
    target.probe("money text x250 (5,000 characters)", lambda: money_text(target))
    target.probe("5,000 Hebrew characters, English voice", lambda: hebrew_text(target))
    target.probe("English and 200 Hebrew characters", lambda: mixed_text(target))
    target.probe("newcomer 1 s behind a money stream", lambda: newcomer(target))
