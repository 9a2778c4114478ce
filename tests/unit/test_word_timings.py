"""Word timings from Kokoro's per-token durations, and captions made from them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from audio.word_timings import (
    SOUND_LEAD_S,
    WordClock,
    Words,
    WordSpan,
    WordTiming,
    align_words,
    captions,
    decode_chunk_words,
    encode_chunk_words,
    split_words,
)
from engines.base import BuiltinVoice, SynthesisOptions
from engines.g2p import G2P
from engines.kokoro.engine import KokoroEngine
from tests.support.kokoro_engines import loaded_onnx_kokoro
from text.languages import resolve_language

ENGLISH = resolve_language("en")
RATE = 24_000


def near(seconds: float) -> float:
    """A time that compares equal to any within pytest's tolerance, where a WordTiming's float goes."""
    return cast(float, pytest.approx(seconds))


def letters(word: str) -> str:
    """A stand-in G2P for the pure tests: a word's letters, lower-cased."""
    return "".join(ch for ch in word.lower() if ch.isalpha())


def covered(tokens: str, spans: list[WordSpan]) -> list[tuple[str, str]]:
    return [(span.word, tokens[span.first : span.stop]) for span in spans]


# --- words of the text ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello, world.", ["Hello,", "world."]),
        ("wait — what?", ["wait —", "what?"]),
        ("“Quoted” text", ["“Quoted”", "text"]),
        ("— Leading dash", ["— Leading", "dash"]),
        ("It's 1998, isn't it?", ["It's", "1998,", "isn't", "it?"]),
        ("你好，世界。再见", ["你好，", "世界。", "再见"]),
        ("...", ["..."]),
        ("  ", []),
    ],
)
def test_split_words(text: str, words: list[str]) -> None:
    assert split_words(text) == words


# --- alignment -----------------------------------------------------------------------------------------------------


def test_each_word_gets_the_tokens_of_its_sounds() -> None:
    tokens = "hello, world."
    assert covered(tokens, align_words("Hello, world.", tokens, letters)) == [("Hello,", "hello"), ("world.", "world")]


def test_words_joined_in_the_phonemes_are_split_between_them() -> None:
    tokens = "ˈaʊɾəv ðə bˈɑks"  # "out of the box" as espeak says it in context: "out of" is one phoneme word
    by_word = {"out": "ˈaʊt", "of": "ʌv", "the": "ðə", "box": "bˈɑks"}
    spans = align_words("out of the box", tokens, by_word.__getitem__)
    assert covered(tokens, spans) == [("out", "ˈaʊɾ"), ("of", "əv"), ("the", "ðə"), ("box", "bˈɑks")]


def test_a_word_spoken_as_several_phoneme_words_spans_them() -> None:
    tokens = "ɪn nˈaɪntiːn nˈaɪnti ˈeɪt, ænd"
    by_word = {"in": "ɪn", "1998,": "nˈaɪntiːn nˈaɪnti ˈeɪt,", "and": "ænd"}
    spans = align_words("in 1998, and", tokens, by_word.__getitem__)
    assert covered(tokens, spans) == [("in", "ɪn"), ("1998,", "nˈaɪntiːn nˈaɪnti ˈeɪt"), ("and", "ænd")]


def test_a_word_without_a_sound_shares_the_gap_between_its_neighbours() -> None:
    tokens = "ab -- cd"
    spans = align_words("ab xx cd", tokens, lambda word: "" if word == "xx" else word)
    assert covered(tokens, spans) == [("ab", "ab"), ("xx", " -- "), ("cd", "cd")]
    assert align_words("", "", letters) == []
    assert covered("...", align_words("...", "...", letters)) == [("...", "...")]


def test_espeak_alignment_on_hard_text() -> None:
    """The real espeak-ng route: numbers, currency, abbreviations, contractions, joined function words."""
    g2p = G2P("espeak")
    text = "Dr. Smith paid $123.45 for 3 tickets — that's 20% off, isn't it? The U.S. team won in 1998, out of the box."
    tokens = g2p.phonemize(text, ENGLISH)
    spans = align_words(text, tokens, lambda word: g2p.phonemize(word, ENGLISH))
    assert [s.word for s in spans] == split_words(text)
    assert all(s.first < s.stop for s in spans)
    assert all(a.stop <= b.first for a, b in zip(spans, spans[1:]))
    spoken = dict(covered(tokens, spans))
    assert len(spoken["$123.45"].split()) >= 4 and len(spoken["1998,"].split()) == 3
    assert spoken["tickets —"].startswith("t") and "—" not in spoken["tickets —"]
    assert spoken["out"] + spoken["of"] in tokens.split()  # one phoneme word ("ˌaʊɾəv") shared by two words
    assert spoken["isn't"] == "ˈɪzənt" and spoken["U.S."] == "jˈuː.ˈɛs"


# --- time --------------------------------------------------------------------------------------------------------


def loud(frames: int, samples_per_frame: int = 600) -> np.ndarray:
    """Audio that is audible throughout: nothing to trim."""
    return np.random.default_rng(frames).uniform(-0.5, 0.5, frames * samples_per_frame).astype(np.float32)


def test_clock_turns_frames_into_seconds_with_the_leading_pad_and_the_decoders_lead() -> None:
    assert SOUND_LEAD_S == 0.05
    spans = align_words("ab cd", "ab cd", letters)
    clock = WordClock(spans, RATE, offset=10.0)
    durations = np.array([4, 1, 2, 3, 1, 1, 5])  # pad, a, b, space, c, d, pad: 600 samples (25 ms) a frame
    words = clock.add(durations, loud(17))  # tokens: ab 0.1–0.175 s, cd 0.25–0.3 s; sounds 50 ms earlier
    assert [(w.word, w.start, w.end) for w in words] == [
        ("ab", near(10.05), near(10.125)),
        ("cd", near(10.2), near(10.25)),
    ]
    assert clock.tokens == 5
    early = WordClock([WordSpan("a", 0, 1)], RATE).add(np.array([1, 2, 1]), loud(4))
    assert early == [WordTiming("a", 0.0, near(0.025))]  # never before the audio starts


def test_a_pause_held_in_a_words_last_token_is_trimmed_off() -> None:
    """Kokoro gives the phoneme before a full stop the frames of the pause after it; the word ends with its sound."""
    audio = np.zeros(20 * 600, dtype=np.float32)
    audio[int(0.06 * RATE) : int(0.2 * RATE)] = loud(1, int(0.14 * RATE))
    (word,) = WordClock([WordSpan("ab.", 0, 2)], RATE).add(np.array([4, 2, 12, 2]), audio)
    assert (word.start, word.end) == (near(0.05), near(0.2))  # not 0.4: 0.45 less the lead


def test_clock_times_words_across_windows_as_they_complete() -> None:
    spans = [WordSpan("one", 0, 2), WordSpan("two", 3, 5), WordSpan("three", 5, 7)]
    clock = WordClock(spans, RATE)
    assert clock.add(np.array([2, 1, 1, 1, 1, 2]), loud(8)) == [WordTiming("one", 0.0, near(0.05))]
    # The second window's samples per frame come from its length: 1,200 here. "two" straddles the windows.
    assert clock.add(np.array([1, 1, 1, 1, 1]), loud(5, 1200)) == [
        WordTiming("two", near(0.075), near(0.25)),
        WordTiming("three", near(0.25), near(0.35)),
    ]


def test_bad_durations_are_errors() -> None:
    clock = WordClock([WordSpan("a", 0, 1)], RATE)
    for bad in ([1, 1], [1, -1, 1], [0, 0, 0]):
        with pytest.raises(ValueError, match="durations of a window"):
            clock.add(np.array(bad), loud(3))


def test_public_shape_and_shift() -> None:
    timing = WordTiming("word", 1.23456, 2.0).shifted(0.5)
    assert timing.public() == {"word": "word", "start": 1.735, "end": 2.5}


# --- the real model ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(assembled_model: Path) -> Iterator[KokoroEngine]:
    with loaded_onnx_kokoro(assembled_model) as kokoro:
        yield kokoro


def speak_timed(
    engine: KokoroEngine, text: str, code: str = "en", speed: float = 1.0
) -> tuple[np.ndarray, list[WordTiming]]:
    voice = engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))
    options = SynthesisOptions(resolve_language(code), {"speed": speed})
    spoken = engine.spoken_text(text, options)  # as the service plans it: the engine speaks this, timing `text`
    pieces = list(engine.stream_timed(spoken.text, voice, options, written=text))
    return np.concatenate([audio for audio, _ in pieces]), [word for _, words in pieces for word in words]


def check_timings(text: str, audio: np.ndarray, words: list[WordTiming]) -> None:
    assert [w.word for w in words] == split_words(text)  # every word, in order
    assert all(0.0 <= w.start < w.end <= len(audio) / RATE for w in words)  # inside the audio, never empty
    assert all(a.end <= b.start for a, b in zip(words, words[1:]))  # monotonic


@pytest.mark.slow
def test_timed_stream_is_the_same_audio_with_words_from_the_offset(engine: KokoroEngine) -> None:
    voice = engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))
    options = SynthesisOptions(ENGLISH, {"speed": 1.0})
    plain = list(engine.stream("Same audio, with words.", voice, options))
    timed = list(engine.stream_timed("Same audio, with words.", voice, options, offset=2.5))
    assert len(plain) == len(timed) and all(np.array_equal(a, b) for a, (b, _) in zip(plain, timed))
    words = [word for _, piece in timed for word in piece]
    assert [w.word for w in words] == ["Same", "audio,", "with", "words."]
    assert 2.5 < words[0].start and words[-1].end < 2.5 + len(plain[0]) / RATE


@pytest.mark.slow
def test_real_speech_is_timed_word_by_word(engine: KokoroEngine) -> None:
    text = "Dr. Smith paid $123.45 for 3 tickets — that's 20% off, isn't it?"
    audio, words = speak_timed(engine, text)
    check_timings(text, audio, words)
    money = next(w for w in words if w.word == "$123.45")
    assert money.end - money.start > 4 * max(w.end - w.start for w in words if w.word in ("for", "3"))
    # Speed shortens the frames the model gives, so every time scales with it.
    fast_audio, fast = speak_timed(engine, text, speed=1.6)
    check_timings(text, fast_audio, fast)
    assert fast[-1].end < 0.75 * words[-1].end


@pytest.mark.slow
def test_text_over_the_model_limit_is_timed_across_windows(engine: KokoroEngine) -> None:
    text = " ".join(["Every word of this long line counts."] * 15)  # about 600 tokens: two windows
    audio, words = speak_timed(engine, text, speed=2.0)  # the same windows (of tokens) for half the audio to make
    check_timings(text, audio, words)
    assert len(words) == 15 * 7


@pytest.mark.slow
def test_other_languages_are_timed(engine: KokoroEngine) -> None:
    for code, text, count in (("es", "Hola, ¿cómo estás? Tengo 25 años.", 6), ("zh", "你好，世界。", 2)):
        audio, words = speak_timed(engine, text, code)
        check_timings(text, audio, words)
        assert len(words) == count, code


# --- captions ------------------------------------------------------------------------------------------------------


WORDS = [
    WordTiming("Hello", 0.3, 0.62),
    WordTiming("there.", 0.7, 1.1),
    WordTiming("Is", 1.3, 1.4),
    WordTiming("<this>", 1.45, 1.8),
    WordTiming("&", 1.85, 1.9),
    WordTiming("that?", 3.2, 3.6),
]


def test_webvtt() -> None:
    assert captions(WORDS, "vtt") == (
        "WEBVTT\n\n"
        "00:00:00.300 --> 00:00:01.100\nHello there.\n\n"
        "00:00:01.300 --> 00:00:01.900\nIs &lt;this&gt; &amp;\n\n"  # a pause over a second starts a new cue
        "00:00:03.200 --> 00:00:03.600\nthat?\n\n"
    )


def test_srt() -> None:
    assert captions(WORDS, "srt") == (
        "1\n00:00:00,300 --> 00:00:01,100\nHello there.\n\n"
        "2\n00:00:01,300 --> 00:00:01,900\nIs <this> &\n\n"
        "3\n00:00:03,200 --> 00:00:03,600\nthat?\n\n"
    )
    assert captions([], "srt") == "" and captions([], "vtt") == "WEBVTT\n\n"


def cues_of(srt: str) -> list[tuple[float, float, str]]:
    cues = []
    for cue in srt.strip().split("\n\n"):
        _, stamps, line = cue.split("\n")
        start, end = (
            int(t[:2]) * 3600 + int(t[3:5]) * 60 + int(t[6:8]) + int(t[9:]) / 1000 for t in stamps.split(" --> ")
        )
        cues.append((start, end, line))
    return cues


def test_cues_respect_their_length_and_duration_caps() -> None:
    words = [WordTiming(f"word{i:02d}", 0.4 * i, 0.4 * i + 0.3) for i in range(40)]
    by_length = cues_of(captions(words, "srt", max_chars=30))
    assert max(len(line) for _, _, line in by_length) == len("word00 word01 word02 word03")
    by_time = cues_of(captions(words, "srt", max_seconds=1.2))
    assert all(0 < end - start <= 1.2 for start, end, _ in by_time) and len(by_time) == 14
    for cues in (by_length, by_time):
        assert " ".join(line for _, _, line in cues).split() == [w.word for w in words]
        assert all(a[1] <= b[0] for a, b in zip(cues, cues[1:]))


def test_long_times_and_cjk_clauses() -> None:
    late = [WordTiming("你好，", 3725.0004, 3725.2), WordTiming("世界。", 3725.2, 3725.5)]
    assert captions(late, "vtt") == "WEBVTT\n\n01:02:05.000 --> 01:02:05.500\n你好，世界。\n\n"
    assert captions([WordTiming("a.", 1.0, 1.0)], "srt") == "1\n00:00:01,000 --> 00:00:01,001\na.\n\n"


def test_chunk_words_round_trip_and_are_checked_against_their_audio() -> None:
    chunks = [
        (4800, Words([WordTiming("Hello,", 0.0, 0.08)])),
        (9600, Words([WordTiming("naïve", 0.1, 0.15), WordTiming("world.", 0.15, 0.2)])),
    ]
    stored = encode_chunk_words(chunks)
    assert len(stored) % 2 == 0
    assert decode_chunk_words(stored, 9600) == chunks
    assert decode_chunk_words(stored, 9602) is None  # not the audio it was stored beside
    assert decode_chunk_words(stored[:-3], 9600) is None
    assert decode_chunk_words(b'[[9600, [["a", 0, 1]]], [4800, []]]', 9600) is None  # out of order
