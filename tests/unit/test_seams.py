"""Seams between chunks: model silence trimmed, pauses of the intended length, no clicks, streaming behaviour."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from audio.seams import FADE_SECONDS, MARGIN_SECONDS, PAUSE_SECONDS, SILENCE_THRESHOLD, ChunkJoiner
from text.chunking import Pause

RATE = 24_000
MARGIN = round(MARGIN_SECONDS * RATE)
FADE = round(FADE_SECONDS * RATE)


def speech_like(seconds: float, seed: int, lead: float = 0.3, trail: float = 0.45) -> np.ndarray:
    """A voiced burst with model-like silence around it: a faint noise floor, then an abrupt (clicky) onset."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    envelope = 0.2 + 0.15 * np.sin(2 * np.pi * 3 * t)
    voiced = envelope * np.sin(2 * np.pi * (140 + 30 * seed) * t + 1.0)  # starts at sin(1.0): a step from silence

    def floor(n: int) -> np.ndarray:
        return (0.001 * rng.standard_normal(n)).astype(np.float32)

    return np.concatenate([floor(int(lead * RATE)), voiced.astype(np.float32), floor(int(trail * RATE))])


def split(audio: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    pieces, pos, i = [], 0, 0
    while pos < len(audio):
        size = sizes[i % len(sizes)]
        pieces.append(audio[pos : pos + size])
        pos, i = pos + size, i + 1
    return pieces


def joined(joiner: ChunkJoiner, chunks: list[tuple[list[np.ndarray], Pause]]) -> np.ndarray:
    out = [
        piece
        for i, (pieces, pause) in enumerate(chunks)
        for piece in joiner.join(iter(pieces), pause, last=i == len(chunks) - 1)
    ]
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def audible(audio: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.abs(audio) >= SILENCE_THRESHOLD)


def max_step(audio: np.ndarray) -> float:
    return float(np.max(np.abs(np.diff(audio.astype(np.float64))))) if len(audio) > 1 else 0.0


@pytest.mark.parametrize("sizes", [[10**9], [3840], [7680], [1, 2, 997, 5000], [240, 0, 17]])
def test_only_silence_is_removed_and_edges_are_faded(sizes: list[int]) -> None:
    audio = speech_like(1.0, seed=1)
    out = joined(ChunkJoiner(RATE), [(split(audio, sizes), "sentence")])
    loud = audible(audio)
    start, end = loud[0] - MARGIN, loud[-1] + 1 + MARGIN
    assert len(out) == end - start
    # Everything outside [start, end) was silence; inside, the audio is untouched apart from the fades.
    assert np.abs(audio[:start]).max() < SILENCE_THRESHOLD and np.abs(audio[end:]).max() < SILENCE_THRESHOLD
    np.testing.assert_array_equal(out[FADE:-FADE], audio[start + FADE : end - FADE])
    assert np.all(np.abs(out[:FADE]) <= np.abs(audio[start : start + FADE]))
    assert np.all(np.abs(out[-FADE:]) <= np.abs(audio[end - FADE : end]))


def test_output_does_not_depend_on_how_the_audio_is_split() -> None:
    chunks = [speech_like(0.8, seed=1), speech_like(0.5, seed=2), speech_like(0.3, seed=3)]
    pauses: list[Pause] = ["clause", "paragraph", "sentence"]
    reference = joined(ChunkJoiner(RATE), [([c], p) for c, p in zip(chunks, pauses)])
    for sizes in ([1000], [7680], [1, 50, 3000], [24_000]):
        assert np.array_equal(
            joined(ChunkJoiner(RATE), [(split(c, sizes), p) for c, p in zip(chunks, pauses)]), reference
        )


@pytest.mark.parametrize("pause", ["none", "clause", "sentence", "paragraph"])
def test_pause_between_chunks_has_its_intended_length(pause: Pause) -> None:
    first, second = speech_like(0.6, seed=1), speech_like(0.6, seed=2)
    out = joined(ChunkJoiner(RATE), [([first], pause), ([second], "sentence")])
    loud = audible(out)
    gaps = np.diff(loud)
    seam = int(np.argmax(gaps))  # the longest quiet run is the seam: each burst is continuous
    assert gaps[seam] - 1 == round(PAUSE_SECONDS[pause] * RATE)
    # Nothing else is lost: the output is both trimmed chunks plus the pause.
    assert len(out) == sum(audible(c)[-1] - audible(c)[0] + 1 + 2 * MARGIN for c in (first, second)) + (
        round(PAUSE_SECONDS[pause] * RATE) - 2 * MARGIN
    )


def test_pauses_grow_with_the_boundary() -> None:
    values = [PAUSE_SECONDS[p] for p in ("none", "clause", "sentence", "paragraph")]
    assert values == sorted(values) and values[0] < 0.22  # a seam inside a phrase is no audible break


def test_seams_have_no_step_larger_than_inside_the_audio() -> None:
    chunks = [speech_like(0.5, seed=s, lead=0.0, trail=0.0) for s in (1, 2, 3)]  # abrupt starts and ends
    assert all(abs(c[0]) > 0.1 and abs(c[-1]) > 0.05 for c in chunks)
    inside = max(max_step(c) for c in chunks)
    out = joined(ChunkJoiner(RATE), [([c], "none") for c in chunks])
    assert max_step(np.concatenate([[0.0], out, [0.0]])) <= inside + 1e-7  # from silence, across seams, to silence


def test_last_chunk_has_no_pause_and_a_silent_chunk_gives_only_its_pause() -> None:
    joiner = ChunkJoiner(RATE)
    audio = speech_like(0.5, seed=1)
    last = np.concatenate(list(joiner.join(iter([audio]), "paragraph", last=True)))
    assert len(last) == audible(audio)[-1] - audible(audio)[0] + 1 + 2 * MARGIN
    silent = list(joiner.join(iter([np.zeros(RATE, np.float32)]), "sentence", last=False))
    assert sum(len(p) for p in silent) == round(PAUSE_SECONDS["sentence"] * RATE) - MARGIN
    assert not np.any(np.concatenate(silent))
    assert list(joiner.join(iter([]), "sentence", last=True)) == []


def test_first_audio_leaves_before_the_rest_of_the_chunk_is_generated() -> None:
    audio = speech_like(1.0, seed=1)
    pieces = split(audio, [3840])
    requested: list[int] = []

    def engine() -> Iterator[np.ndarray]:
        for i, piece in enumerate(pieces):
            requested.append(i)
            yield piece

    onset_piece = audible(audio)[0] // 3840
    out = ChunkJoiner(RATE).join(engine(), "sentence", last=True)
    first = next(out)
    assert requested[-1] == onset_piece  # no piece after the onset's was asked for
    assert len(first) >= 3840 - (audible(audio)[0] % 3840) - FADE  # and all of that piece's speech came out


def test_quiet_stretches_inside_a_chunk_are_kept() -> None:
    a, b = speech_like(0.3, seed=1, trail=0.2), speech_like(0.3, seed=2, lead=0.0)
    audio = np.concatenate([a, b])
    out = joined(ChunkJoiner(RATE), [(split(audio, [500]), "sentence")])
    loud = audible(audio)
    np.testing.assert_array_equal(out[FADE:-FADE], audio[loud[0] - MARGIN + FADE : loud[-1] + 1 + MARGIN - FADE])


def test_input_arrays_are_not_modified() -> None:
    audio = speech_like(0.4, seed=1, lead=0.0, trail=0.0)
    copy = audio.copy()
    list(ChunkJoiner(RATE).join(iter([audio]), "clause", last=False))
    assert np.array_equal(audio, copy)


@pytest.mark.slow
def test_real_kokoro_chunks_join_like_one_utterance(assembled_model: Path) -> None:
    from engines.g2p import G2P
    from engines.kokoro.onnx_backend import OnnxBackend
    from engines.kokoro.stock_voices import StockVoices
    from text.chunking import chunk_text
    from text.languages import resolve_language
    from text.normalize import normalize_english

    backend = OnnxBackend(assembled_model, threads=1)  # as every test engine: the same audio for less CPU
    backend.load()
    pack = StockVoices().pack("af_heart")
    g2p, english = G2P("espeak"), resolve_language("en")
    text = "When the morning light reached the farmhouse on the hill, the children ran down to the kitchen."
    chunks = chunk_text(text, 60, 120)
    assert [c.pause for c in chunks] == ["clause", "sentence"]

    def synthesize(phrase: str) -> np.ndarray:
        phonemes = g2p.phonemize(normalize_english(phrase), english)
        tokens = [backend.vocab[p] for p in phonemes if p in backend.vocab]
        return backend.infer(tokens, pack[len(tokens) - 1], 1.0)

    raw = [synthesize(c.text) for c in chunks]
    assert all(audible(r)[0] > 0.1 * RATE and len(r) - audible(r)[-1] > 0.1 * RATE for r in raw)  # model silence
    joiner = ChunkJoiner(RATE)
    outputs = [
        np.concatenate(list(joiner.join(iter(split(r, [4800])), c.pause, last=i == len(raw) - 1)))
        for i, (r, c) in enumerate(zip(raw, chunks))
    ]
    for r, out in zip(raw, outputs):  # each chunk: only its own leading and trailing silence removed
        loud = audible(r)
        start = loud[0] - MARGIN
        np.testing.assert_array_equal(out[FADE : audible(out)[-1]], r[start + FADE : start + audible(out)[-1]])
    whole = np.concatenate(outputs)
    seam_end, seam_start = audible(outputs[0])[-1], len(outputs[0]) + audible(outputs[1])[0]
    assert seam_start - seam_end - 1 == round(PAUSE_SECONDS["clause"] * RATE)
    assert audible(whole)[0] == MARGIN  # no model silence before the first word
    around_seam = whole[seam_end - RATE // 20 : seam_start + RATE // 20]
    assert max_step(around_seam) <= max(max_step(r) for r in raw)
