"""Audio framing: float32 samples to s16le PCM, and PCM to WAV."""

from __future__ import annotations

import struct

import numpy as np

SAMPLE_WIDTH = 2  # bytes per s16le sample
WAV_HEADER_BYTES = 44


def to_pcm16(samples: np.ndarray) -> bytes:
    """Mono float samples in [-1, 1] to little-endian 16-bit PCM (clipped, never wrapped)."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int, channels: int = 1) -> bytes:
    """The 44-byte RIFF/WAVE header of a 16-bit PCM file holding `data_bytes` bytes of samples."""
    byte_rate = sample_rate * channels * SAMPLE_WIDTH
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + data_bytes,
        b"WAVE",
        b"fmt ",
        16,
        1,
        channels,
        sample_rate,
        byte_rate,
        channels * SAMPLE_WIDTH,
        8 * SAMPLE_WIDTH,
        b"data",
        data_bytes,
    )


def pcm_to_wav(pcm: bytes, sample_rate: int) -> bytes:
    return wav_header(sample_rate, len(pcm)) + pcm


def wav_to_pcm(wav: bytes) -> bytes:
    """The samples of a WAV made by `pcm_to_wav`."""
    return wav[WAV_HEADER_BYTES:]
