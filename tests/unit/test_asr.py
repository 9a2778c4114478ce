"""bench/asr.py: Whisper assembly, word error rate with normalization, and the phrase-break detector."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import asr
from bench.asr import Transcript, Word, phrase_breaks, spoken_words, word_errors


def test_spoken_words_make_digits_and_words_comparable() -> None:
    assert spoken_words("Dr. Smith paid $4.50, at 7:45 am!") == spoken_words(
        "Doctor Smith paid four dollars and fifty cents at seven forty-five AM"
    )
    assert spoken_words("Twenty-four — it's 'fine'.") == ["twenty", "four", "it's", "fine"]


def test_word_errors_count_substitutions_insertions_and_deletions() -> None:
    assert word_errors("It costs $4.50 today.", "it costs four dollars and fifty cents today").errors == 0
    errors = word_errors("the cat sat on the mat", "the bat sat on mat today")
    assert (errors.errors, errors.reference_words) == (3, 6) and errors.rate == 0.5
    assert word_errors("", "").rate == 0.0


def words(*timed: tuple[str, float, float]) -> list[Word]:
    return [Word(text, start, end) for text, start, end in timed]


def test_a_long_silence_inside_a_phrase_is_a_break() -> None:
    heard = words(
        ("on", 0.0, 0.2), ("the", 0.25, 0.4), ("kitchen", 0.9, 1.3), ("shelf,", 1.35, 1.7), ("each", 2.3, 2.5)
    )
    breaks = phrase_breaks("on the kitchen shelf, each", heard)
    assert [(b.before, b.after, b.seconds) for b in breaks] == [("the", "kitchen", 0.5)]  # not after "shelf,"


def test_short_gaps_and_unrecognized_words_are_not_breaks() -> None:
    heard = words(("on", 0.0, 0.2), ("the", 0.3, 0.4), ("kitten", 0.9, 1.3), ("shelf", 1.5, 1.7))
    assert phrase_breaks("on the kitchen shelf", heard) == []  # "kitten" matched nothing; 0.2 s < 0.22 s
    numbers = words(("paid", 0.0, 0.3), ("$4.50", 0.9, 1.8), ("today", 1.9, 2.2))
    assert [b.after for b in phrase_breaks("paid $4.50 today", numbers)] == ["$4.50"]


def tone_with_gaps(rate: int, seconds: float, gaps: list[tuple[float, float]]) -> np.ndarray:
    """A 220 Hz tone of `seconds`, silent over each (start, end) of `gaps`."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    for start, end in gaps:
        samples[int(start * rate) : int(end * rate)] = 0.0
    return samples


def test_silences_are_found_between_sounds_only() -> None:
    samples = tone_with_gaps(16_000, 3.0, [(0.0, 0.5), (1.0, 1.3), (2.0, 2.05), (2.8, 3.0)])
    assert asr.silences(samples, 16_000, 0.22) == [(1.0, 1.3)]  # not the ends; 50 ms is too short
    assert asr.silences(samples, 16_000, 0.04) == [(1.0, 1.3), (2.0, 2.05)]


def test_a_break_counts_only_where_the_audio_is_silent() -> None:
    heard = Transcript(
        "in the US northwest",
        tuple(words(("in", 0.6, 0.7), ("the", 0.75, 0.9), ("U.S.", 1.0, 1.5), ("northwest", 1.9, 2.4))),
    )
    solid = tone_with_gaps(16_000, 3.0, [])
    unconfirmed = asr.report("in the U.S. Northwest", heard, solid, 16_000)
    assert (unconfirmed["breaks"], [b["after"] for b in unconfirmed["unconfirmed_breaks"]]) == ([], ["northwest"])
    # Whisper puts the gap 0.2 s early and makes it longer than the silence is: still the same silence.
    gapped = tone_with_gaps(16_000, 3.0, [(1.7, 1.95)])
    confirmed = asr.report("in the U.S. Northwest", heard, gapped, 16_000)
    assert ([b["after"] for b in confirmed["breaks"]], confirmed["unconfirmed_breaks"]) == (["northwest"], [])


def test_assembly_is_atomic_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = asr._recorded_file

    def tampered(package: str, relative: str) -> tuple[Path, str]:
        path, digest = real(package, relative)
        return path, digest if package.endswith("part1") else "0" * 64

    monkeypatch.setattr(asr, "_recorded_file", tampered)
    with pytest.raises(asr.AssemblyError, match="part2"):
        asr.assemble(tmp_path / "whisper")
    assert list(tmp_path.iterdir()) == []  # neither the folder nor a temporary one is left


@pytest.fixture(scope="module")
def transcriber() -> asr.Transcriber:
    return asr.Transcriber()


@pytest.mark.slow
def test_whisper_hears_kokoro_and_finds_a_break_the_joiner_removes(
    assembled_model: Path, transcriber: asr.Transcriber
) -> None:
    from audio.encoding import pcm_to_wav, to_pcm16
    from audio.seams import ChunkJoiner
    from engines.g2p import G2P
    from engines.kokoro.onnx_backend import OnnxBackend
    from engines.kokoro.stock_voices import StockVoices
    from text.languages import resolve_language

    backend = OnnxBackend(assembled_model, threads=1)
    backend.load()
    pack = StockVoices().pack("af_heart")
    g2p, english = G2P("espeak"), resolve_language("en")

    def synthesize(text: str) -> np.ndarray:
        tokens = [backend.vocab[p] for p in g2p.phonemize(text, english) if p in backend.vocab]
        return backend.infer(tokens, pack[len(tokens) - 1], 1.0)

    halves = [synthesize("The children ran down to the old"), synthesize("kitchen behind the house.")]
    reference = "The children ran down to the old kitchen behind the house."
    raw = transcriber.transcribe(pcm_to_wav(to_pcm16(np.concatenate(halves)), 24_000))
    assert word_errors(reference, raw.text).errors <= 1
    found = phrase_breaks(reference, raw.words)
    assert [(b.before.strip(",."), b.after) for b in found] == [("old", "kitchen")]  # Whisper may write "old,"
    joiner = ChunkJoiner(24_000)
    joined = np.concatenate([p for i, h in enumerate(halves) for p in joiner.join(iter([h]), "none", last=i == 1)])
    heard: Transcript = transcriber.transcribe(pcm_to_wav(to_pcm16(joined), 24_000))
    assert word_errors(reference, heard.text).errors <= 1
    assert phrase_breaks(reference, heard.words) == []
