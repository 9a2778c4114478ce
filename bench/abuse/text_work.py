"""Probes of text whose work is out of proportion to its length as written: money read out as words, a script the
voice's language cannot read (once spelled out letter by letter), emoji (once read by name), a newcomer waiting
behind steps that are long as spoken, and a live producer flushing word by word (once a step per word)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from bench.abuse.probing import Answer, ProbeFailed, Target, code_of, expect
from bench.common import PROBE, SIXTY_WORDS

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


EMOJI_TEXT = "😀🎉👋🏽✅❤️" * 60
"""300 emoji (with a skin tone and a presentation selector): read by name, they were 33 s of audio."""


def emoji_text(target: Target) -> Answer:
    """300 emoji alone: nothing spoken, a 422 saying so; beside a few words, the words alone are spoken."""
    answer = refused_text(target, EMOJI_TEXT, "text-work-emoji", 422, "unreadable_text", "emoji")
    beside = stream(target, f"Well done {EMOJI_TEXT} see you.", "text-work-emoji", read_for=4 * READ_FOR_S)
    expect(beside.status == 200 and beside.complete, f"beside words: {beside.status} {beside.code}")
    expect(beside.audio_s < 3, f"beside words: {beside.audio_s:.1f} s of audio for 4 words")
    return Answer(answer.status, f"{answer.detail}; beside 4 words: {beside.audio_s:.2f} s of audio")


FLUSHED_WORDS = 100
MAX_FLUSHED_OVER_WHOLE = 2.0
"""Synthesis seconds per audio second of one-word flushes, at most this many times that of the same words sent whole
(a ratio of two runs on the same machine, so its load cancels out). Landed, each word was a step: 93.7 s of synthesis
for 48.9 s of audio."""


def one_word_flushes(target: Target, words: int = FLUSHED_WORDS) -> Answer:
    """A live request whose producer flushes after every word, `words` of them sent at once (the engine is busy with
    the first while the rest arrive): the words queued before a step are one step, so the engine spends about as long
    as on the same words sent whole, not a step's fixed cost per word. Synthesis time is each request's own fairness
    key's (`polytts_key_gpu_seconds`), audio the `done` event's and the whole stream's."""
    run = time.time_ns()
    said = " ".join([SIXTY_WORDS] * (words // 60 + 1)).split()[:words]
    whole = stream(target, " ".join(said), f"text-work-whole-{run}", read_for=10 * READ_FOR_S)
    expect(whole.status == 200 and whole.complete, f"the words sent whole: {whole.status} {whole.code}")
    whole_ratio = key_gpu_seconds(target, f"text-work-whole-{run}") / whole.audio_s
    key = f"text-work-flushes-{run}"
    url = target.url.replace("http", "ws", 1) + "/tts/live/ws?voice=af_heart"
    with connect(url, open_timeout=30, additional_headers={"X-Fairness-Key": key, **target.auth}) as ws:
        for word in said:
            ws.send(json.dumps({"text": word + " ", "flush": True}))
        ws.send(json.dumps({"end": True}))
        done: dict[str, object] = {}
        while not done:
            event = ws.recv(timeout=600)
            if isinstance(event, str) and json.loads(event)["type"] in ("done", "error"):
                done = json.loads(event)
    expect(done.get("type") == "done", f"the live request ended with {done}")
    audio_s = float(str(done["audio_seconds"]))
    gpu_s = key_gpu_seconds(target, key)
    ratio = gpu_s / audio_s if audio_s else float("inf")
    detail = (
        f"{gpu_s:.1f} s of synthesis for {audio_s:.1f} s of audio ({ratio:.2f} per audio second; "
        f"the words sent whole {whole_ratio:.2f})"
    )
    expect(ratio <= MAX_FLUSHED_OVER_WHOLE * whole_ratio, f"{detail}: over {MAX_FLUSHED_OVER_WHOLE} times")
    return Answer("done", detail)


def key_gpu_seconds(target: Target, key: str) -> float:
    """The GPU seconds fairness key `key` has used (/metrics is public)."""
    for family in text_string_to_metric_families(PROBE.get(target.url + "/metrics", timeout=30).text):
        for sample in family.samples:
            if sample.name == "polytts_key_gpu_seconds_total" and sample.labels.get("key") == key:
                return float(sample.value)
    raise ProbeFailed(f"no GPU time of key {key} in /metrics")


def probes(target: Target, own: bool) -> None:
    target.probe("money text x250 (5,000 characters)", lambda: money_text(target))
    target.probe("5,000 Hebrew characters, English voice", lambda: hebrew_text(target))
    target.probe("English and 200 Hebrew characters", lambda: mixed_text(target))
    target.probe("newcomer 1 s behind a money stream", lambda: newcomer(target))
    target.probe("300 emoji, alone and beside words", lambda: emoji_text(target))
    target.probe(f"{FLUSHED_WORDS} one-word flushes on a live request", lambda: one_word_flushes(target))
