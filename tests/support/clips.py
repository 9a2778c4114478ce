"""Real audio for tests: decodable clips, checks that a response is speech, and the length the seam joiner gives a
response."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import soundfile as sf

from audio.seams import MARGIN_SECONDS, PAUSE_SECONDS


def wav_clip(seconds: float = 1.0, freq: float = 220.0, rate: int = 16_000, fmt: str = "WAV") -> bytes:
    """A real, decodable clip: a sine with a little noise so different parameters give different bytes."""
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(int(freq * 1000 + seconds * 10))
    samples = 0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(t.size)
    buffer = io.BytesIO()
    sf.write(buffer, samples.astype(np.float32), rate, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def decode_wav(body: bytes) -> tuple[np.ndarray, int]:
    samples, rate = sf.read(io.BytesIO(body), dtype="float32")
    return samples, rate


def assert_speech_like(samples: np.ndarray, rate: int) -> None:
    """Not silence, not clipped, and shaped like speech: loud and quiet 20 ms frames alternate."""
    assert np.sqrt(np.mean(samples**2)) > 0.01, "silence"
    assert np.mean(np.abs(samples) > 0.999) < 0.001, "clipped"
    frames = samples[: len(samples) // (rate // 50) * (rate // 50)].reshape(-1, rate // 50)
    energy = np.sqrt(np.mean(frames**2, axis=1))
    assert energy.std() / energy.mean() > 0.5, "flat energy: not speech-like"
    crossings = np.mean(np.abs(np.diff(np.signbit(samples).astype(np.int8))))
    assert 0.01 < crossings < 0.5, f"zero-crossing rate {crossings} is not speech-like"


def assert_joined_length(length: int, generations: Sequence[int], rate: int) -> None:
    """`length` samples are model generations of the given lengths, audible from end to end (a tiny random model's
    noise), as the seam joiner joins them at sentence seams: each seam is the pause, less the quiet margin the next
    generation's onset would keep (it has none). A seam is measured from the last audible sample, and the noise may
    end on a few samples below the silence threshold: each seam may come out that much shorter (at most 2 ms here;
    a generation more or less is thousands of samples)."""
    seam = round(PAUSE_SECONDS["sentence"] * rate) - round(MARGIN_SECONDS * rate)
    expected = sum(generations) + (len(generations) - 1) * seam
    slack = (len(generations) - 1) * round(0.002 * rate)
    assert expected - slack <= length <= expected, f"{length} samples, not {len(generations)} generations ({expected})"
