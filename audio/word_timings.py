"""When each word is spoken: Kokoro's per-token durations mapped back to the words of the text, and captions.

Kokoro's duration predictor gives every phoneme token (and the padding token at each end) a whole number of frames,
after speed is applied; the length regulator repeats each token's features that many times, and the decoder turns
one frame into `2 × prod(upsample_rates) × istft_hop` samples (2 × 10 × 6 × 5 = 600 at 24 kHz, i.e. 25 ms, for
Kokoro-82M). A window's audio is therefore exactly `sum(durations) × 600` samples, and a token's place in it is the
running sum of the durations before it, the leading pad's frames included. The samples per frame are taken from
each window's actual length, so a model with another decoder needs no constant here.

Which tokens belong to which word is the hard part: the engine phonemizes a whole chunk at once, and espeak-ng joins
words ("out of" → `ˌaʊɾəv`), splits them ("1998" → three phoneme words), keeps punctuation, and shifts stress.
`align_words` phonemizes each text word on its own, then aligns those per-word phonemes to the chunk's actual token
string character by character (difflib, stress marks, spaces and punctuation ignored), so each actual phoneme takes
the label of the word whose phoneme it matched or replaced. A word then spans from its first to its last labelled
token; a word that matched nothing shares the gap between its neighbours. Spans come out in text order, disjoint,
and every text word gets one. Text without spaces (Japanese, Chinese) is split into clauses at its punctuation:
one timing per clause there.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

import numpy as np

CaptionFormat = Literal["vtt", "srt"]

_PIECE = re.compile(r"\S+")
_CJK_CLAUSE_END = re.compile(r"(?<=[。！？、，；：])")
_STRESS = frozenset("ˈˌ")
_SENTENCE_END = tuple(".!?…。！？")


@dataclass(frozen=True)
class WordTiming:
    word: str
    """As written in the text, with the punctuation attached to it."""
    start: float
    """Seconds from the start of the response's audio."""
    end: float

    def public(self) -> dict[str, object]:
        """The JSON shape clients get: `{"word", "start", "end"}`, times rounded to the millisecond."""
        return {"word": self.word, "start": round(self.start, 3), "end": round(self.end, 3)}

    def shifted(self, seconds: float) -> WordTiming:
        return WordTiming(self.word, self.start + seconds, self.end + seconds)

    def clamped(self, low: float, high: float) -> WordTiming:
        """Kept inside [low, high] (the audio a chunk's words belong to)."""
        start = min(max(self.start, low), high)
        return WordTiming(self.word, start, min(max(self.end, start), high))


@dataclass(frozen=True)
class Words:
    """The timings of the words of one chunk, in seconds of the response's audio; they follow that chunk's audio.
    Every chunk's audio ends with one, without words where the request is not timed."""

    words: list[WordTiming]


@dataclass(frozen=True)
class WordSpan:
    """A word and the tokens it was spoken with: `tokens[first:stop]` of its chunk (empty only in a text whose
    phonemes left no token between two words)."""

    word: str
    first: int
    stop: int


def split_words(text: str) -> list[str]:
    """The words of a text as written: runs of non-space characters, a run without any letter or digit (a dash, a
    quote) attached to the word before it (or after it, at the start), and runs of CJK text cut after each clause
    or sentence mark."""
    pieces = [part for piece in _PIECE.findall(text) for part in _CJK_CLAUSE_END.split(piece) if part]
    words: list[str] = []
    pending = ""
    for piece in pieces:
        if not any(ch.isalnum() for ch in piece):
            if words:
                words[-1] = f"{words[-1]} {piece}"
            else:
                pending = f"{pending}{piece} "
            continue
        words.append(pending + piece)
        pending = ""
    return words or ([pending.strip()] if pending.strip() else [])


def _is_boundary(ch: str) -> bool:
    """Spaces and punctuation (tokens of pauses, not of a word's sounds)."""
    return ch.isspace() or unicodedata.category(ch)[0] in "PSZ"


def _sounds(phonemes: str) -> list[int]:
    """Positions of the characters that are a word's sounds: not boundaries, not stress marks."""
    return [i for i, ch in enumerate(phonemes) if not _is_boundary(ch) and ch not in _STRESS]


def align_words(text: str, tokens: str, phonemize: Callable[[str], str]) -> list[WordSpan]:
    """Which tokens of a chunk each of its words was spoken with.

    `tokens` is the phoneme string the model was given, one character per token (the engine's phonemes with the
    characters outside the model's vocabulary dropped); `phonemize` is the same G2P route and language, applied to
    one word at a time.
    """
    words = split_words(text)
    reference: list[str] = []
    owner: list[int] = []  # the word each reference sound belongs to
    for index, word in enumerate(words):
        phonemes = phonemize(word)
        sounds = [phonemes[i] for i in _sounds(phonemes)]
        reference.extend(sounds)
        owner.extend([index] * len(sounds))
    actual = _sounds(tokens)
    labels: list[int | None] = [None] * len(tokens)
    matcher = SequenceMatcher(None, "".join(reference), "".join(tokens[i] for i in actual), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("equal", "replace"):  # a replaced run is spread evenly over the reference run it replaced
            for j in range(j1, j2):
                labels[actual[j]] = owner[i1 + (j - j1) * (i2 - i1) // (j2 - j1)]
    _fill_within_phoneme_words(tokens, labels)
    return _spans(words, labels)


def _fill_within_phoneme_words(tokens: str, labels: list[int | None]) -> None:
    """Give the unlabelled tokens inside a phoneme word (stress marks, sounds espeak added in context) the label of
    a neighbour in the same phoneme word: a stress mark its vowel's (the next sound), any other the previous one's."""
    start = 0
    while start < len(tokens):
        if _is_boundary(tokens[start]):
            start += 1
            continue
        stop = start
        while stop < len(tokens) and not _is_boundary(tokens[stop]):
            stop += 1
        known = [i for i in range(start, stop) if labels[i] is not None]
        if known:
            for i in range(start, stop):
                if labels[i] is None:
                    after = [k for k in known if k > i]
                    before = [k for k in known if k < i]
                    prefer_next = tokens[i] in _STRESS or not before
                    labels[i] = labels[after[0] if prefer_next and after else before[-1]]
        start = stop


def _spans(words: list[str], labels: list[int | None]) -> list[WordSpan]:
    """Each word's first..last labelled token; words with none share the gap between their neighbours evenly."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for position, label in enumerate(labels):
        if label is not None:
            first.setdefault(label, position)
            last[label] = position
    spans: list[WordSpan] = []
    index = 0
    while index < len(words):
        if index in first:
            spans.append(WordSpan(words[index], first[index], last[index] + 1))
            index += 1
            continue
        missing = index
        while missing < len(words) and missing not in first:
            missing += 1
        gap_start = spans[-1].stop if spans else 0
        gap_stop = first[missing] if missing < len(words) else len(labels)
        count = missing - index
        for k in range(count):
            lo = gap_start + (gap_stop - gap_start) * k // count
            hi = gap_start + (gap_stop - gap_start) * (k + 1) // count
            spans.append(WordSpan(words[index + k], lo, hi))
        index = missing
    return spans


SOUND_LEAD_S = 0.050
"""Kokoro's decoder makes each sound about 50 ms before its token's frames: in continuous speech the vowel→/s/ and
/s/→vowel transitions (where the share of energy above 4 kHz crosses one half) came 50 ms (interquartile 45–60)
before the token bounds, over 75 transitions in three voices; token bounds are moved that much earlier."""
SILENCE_DB = 40.0
"""Quieter than the window's loudest 5 ms by this much is silence. The model puts a pause into the frames of the
phoneme before it (or of the punctuation), so a word's end is pulled back to its last audible 5 ms. Pauses of the
int8 ONNX model can sit only 46–48 dB down (after "fox" in the pangram), which a 50 dB bound counted as sound: word
ends then ran 120–215 ms into four of the fourteen pauses of bench/timings.py's texts. At 40 dB every word end at a
pause, fricative endings ("once,", "speech") included, falls within 20 ms of where its sound stops."""


class WordClock:
    """Times the words of one chunk as the windows of its audio come out of the model, so each piece of audio can
    carry the words it completes (live routes send them with the audio)."""

    def __init__(self, spans: Sequence[WordSpan], sample_rate: int, offset: float = 0.0) -> None:
        """`offset`: where the chunk's audio starts in the response, in seconds."""
        self.spans = list(spans)
        self.sample_rate = sample_rate
        self.offset = offset
        self._starts: list[float] = []  # per token, samples from the chunk's audio start
        self._ends: list[float] = []
        self._audible: list[tuple[int, np.ndarray]] = []  # per window: its first sample, its audible 5 ms steps
        self._hop = max(1, sample_rate // 200)
        self._samples = 0
        self._emitted = 0

    @property
    def tokens(self) -> int:
        """Tokens timed so far."""
        return len(self._starts)

    def add(self, durations: np.ndarray, audio: np.ndarray) -> list[WordTiming]:
        """One window: its tokens' frame counts (pads at both ends included, as the backends return them) and its
        audio; returns the words that end in it (or before it), in order."""
        frames = np.asarray(durations, dtype=np.int64).reshape(-1)
        if frames.size < 3 or (frames < 0).any() or frames.sum() <= 0:
            raise ValueError(f"durations of a window must be non-negative, pads included: {frames.tolist()}")
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        per_frame = len(samples) / float(frames.sum())
        bounds = self._samples + per_frame * np.concatenate(([0], np.cumsum(frames)))
        self._starts.extend(bounds[1:-2].tolist())  # token k of the window spans frames[k + 1]
        self._ends.extend(bounds[2:-1].tolist())
        self._audible.append((self._samples, _audible_steps(samples, self._hop)))
        self._samples += len(samples)
        return self._ready(self.tokens)

    def _ready(self, tokens_seen: int) -> list[WordTiming]:
        timed: list[WordTiming] = []
        while self._emitted < len(self.spans) and self.spans[self._emitted].stop <= tokens_seen:
            timed.append(self._time(self.spans[self._emitted]))
            self._emitted += 1
        return timed

    def _time(self, span: WordSpan) -> WordTiming:
        lead = SOUND_LEAD_S * self.sample_rate
        if span.stop > span.first:
            first, last = self._starts[span.first], self._ends[span.stop - 1]
            start = max(first - lead, 0.0)
            end = max(start, last - lead)
            audible = self._audible_end(first, last)
            end = min(end, audible) if audible is not None and audible > start else end
        else:  # no token of its own: a point where it would have been
            point = self._starts[span.first] if span.first < len(self._starts) else float(self._samples)
            start = end = max(point - lead, 0.0)
        return WordTiming(span.word, self.offset + start / self.sample_rate, self.offset + end / self.sample_rate)

    def _audible_end(self, first: float, last: float) -> float | None:
        """The end of the last audible 5 ms step that starts in [first, last), in samples; None if none does."""
        for window_start, audible in reversed(self._audible):
            steps = np.flatnonzero(audible)
            if not steps.size:
                continue
            positions = window_start + steps * self._hop
            inside = positions[(positions >= first) & (positions < last)]
            if inside.size:
                return float(inside[-1] + self._hop)
            if window_start < first:
                return None
        return None


def _audible_steps(samples: np.ndarray, hop: int) -> np.ndarray:
    """Per `hop` samples, whether their RMS is within SILENCE_DB of the loudest step's."""
    steps = samples[: len(samples) // hop * hop].reshape(-1, hop) if len(samples) >= hop else samples.reshape(1, -1)
    level = 10 * np.log10(np.mean(np.square(steps, dtype=np.float64), axis=1) + 1e-20)
    return level > level.max() - SILENCE_DB


def captions(words: Sequence[WordTiming], fmt: CaptionFormat, max_chars: int = 42, max_seconds: float = 5.0) -> str:
    """WebVTT or SRT captions: words grouped into one-line cues of at most `max_chars` characters and
    `max_seconds`, a new cue after each sentence end and when a pause of over a second separates two words."""
    cues = _cues(words, max_chars, max_seconds)
    if fmt == "vtt":
        body = "".join(f"{_stamp(s, '.')} --> {_stamp(e, '.')}\n{_vtt_escape(t)}\n\n" for s, e, t in cues)
        return "WEBVTT\n\n" + body
    return "".join(f"{n}\n{_stamp(s, ',')} --> {_stamp(e, ',')}\n{t}\n\n" for n, (s, e, t) in enumerate(cues, 1))


def _cues(words: Sequence[WordTiming], max_chars: int, max_seconds: float) -> list[tuple[int, int, str]]:
    """(start ms, end ms, text) per cue; every cue lasts at least a millisecond and none overlaps the next."""
    groups: list[list[WordTiming]] = []
    for word in words:
        current = groups[-1] if groups else None
        if (
            current is None
            or current[-1].word.endswith(_SENTENCE_END)
            or word.start - current[-1].end > 1.0
            or word.end - current[0].start > max_seconds
            or len(_join([*current, word])) > max_chars
        ):
            groups.append([word])
        else:
            current.append(word)
    cues: list[tuple[int, int, str]] = []
    for group in groups:
        start = max(round(group[0].start * 1000), cues[-1][1] if cues else 0)
        end = max(round(group[-1].end * 1000), start + 1)
        cues.append((start, end, _join(group)))
    return cues


def _join(words: Sequence[WordTiming]) -> str:
    """Words with a space between them, except between two CJK clauses."""
    text = ""
    for word in words:
        cjk = text and _is_cjk(text[-1]) and _is_cjk(word.word[0])
        text = f"{text}{word.word}" if not text or cjk else f"{text} {word.word}"
    return text


def _is_cjk(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def _stamp(ms: int, separator: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


ChunkWords = list[tuple[int, Words]]
"""A synthesis's word timings as its audio carried them: after each chunk, the PCM bytes so far and its Words."""


def encode_chunk_words(chunks: ChunkWords) -> bytes:
    """Word timings as a cache entry stores them: JSON, padded with a space to the even length the caches' entries
    have (they hold s16le samples otherwise)."""
    data = json.dumps(
        [[end, [[w.word, w.start, w.end] for w in words.words]] for end, words in chunks],
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8", "surrogatepass")
    return data + b" " * (len(data) % 2)


def decode_chunk_words(data: bytes, pcm_bytes: int) -> ChunkWords | None:
    """The word timings of a cache entry, or None where they do not fit the audio they were stored beside (each
    chunk's end within it, in order, the last at its end)."""
    try:
        chunks = [
            (int(end), Words([WordTiming(str(w), float(s), float(e)) for w, s, e in words]))
            for end, words in json.loads(data.decode("utf-8", "surrogatepass"))
        ]
    except (ValueError, TypeError):
        return None
    ends = [end for end, _ in chunks]
    if not chunks or ends != sorted(ends) or ends[-1] != pcm_bytes:
        return None
    return chunks
