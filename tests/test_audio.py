"""PCM and WAV framing."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf

from audio import pcm_to_wav, to_pcm16, wav_to_pcm


def test_pcm16_scales_and_clips() -> None:
    pcm = np.frombuffer(to_pcm16(np.array([0.0, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0])), "<i2")
    assert pcm.tolist() == [0, 16384, -16384, 32767, -32767, 32767, -32767]


def test_wav_round_trip_through_a_real_decoder() -> None:
    samples = (0.25 * np.sin(np.linspace(0, 100, 24_000))).astype(np.float32)
    pcm = to_pcm16(samples)
    wav = pcm_to_wav(pcm, 24_000)
    decoded, rate = sf.read(io.BytesIO(wav), dtype="float32")
    assert rate == 24_000 and decoded.shape == samples.shape
    assert np.max(np.abs(decoded - samples)) < 1e-4
    assert wav_to_pcm(wav) == pcm
    assert sf.info(io.BytesIO(wav)).subtype == "PCM_16"


def test_empty_wav_is_valid() -> None:
    assert sf.info(io.BytesIO(pcm_to_wav(b"", 16_000))).frames == 0
