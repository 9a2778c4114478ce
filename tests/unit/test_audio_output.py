"""Audio as a front asks for it (audio/output.py): resampled piece by piece as if whole, G.711 μ-law and A-law byte for byte,
32-bit float samples, codecs at the asked rate and bit rate."""

from __future__ import annotations

import io
import warnings

import av
import numpy as np
import pytest

from audio.output import Output, alaw, f32le, mulaw, open_output

RATE = 24_000


def tone(seconds: float = 1.0) -> bytes:
    t = np.arange(int(RATE * seconds)) / RATE
    return (np.sin(2 * np.pi * 440 * t) * 12_000).astype("<i2").tobytes()


def converted(output: Output, pcm: bytes, piece: int | None = None) -> bytes:
    encoder = open_output(output, RATE)
    step = piece or len(pcm)
    return b"".join(encoder.feed(pcm[i : i + step]) for i in range(0, len(pcm), step)) + encoder.finish()


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100])
def test_resampling_in_pieces_is_resampling_whole(rate: int) -> None:
    pcm = tone()
    whole = converted(Output("pcm", rate), pcm)
    assert len(whole) // 2 == rate  # one second in, one second out
    assert converted(Output("pcm", rate), pcm, piece=4801) == whole  # odd piece sizes split samples too


def test_mulaw_matches_the_reference_encoder() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop  # the reference G.711 encoder, in the standard library until 3.13

    every = np.arange(-32768, 32768, dtype="<i2").tobytes()
    assert mulaw(every) == audioop.lin2ulaw(every, 2)
    assert len(converted(Output("pcm", 8000, encoding="mulaw"), tone())) == 8000


def test_alaw_matches_the_reference_encoder() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop

    every = np.arange(-32768, 32768, dtype="<i2").tobytes()
    assert alaw(every) == audioop.lin2alaw(every, 2)
    wav = converted(Output("wav", 8000, encoding="alaw"), tone())
    assert wav[20:22] == (6).to_bytes(2, "little") and len(wav) == 44 + 8000  # WAVE_FORMAT_ALAW, 8 bits a sample


def test_f32le_keeps_the_samples() -> None:
    pcm = tone(0.1)
    floats = np.frombuffer(f32le(pcm), dtype="<f4")
    assert np.allclose(floats * 32768, np.frombuffer(pcm, dtype="<i2"))


def test_mp3_at_the_asked_rate_and_bit_rate() -> None:
    data = converted(Output("mp3", 44100, bit_rate=128_000), tone())
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.audio[0]
        assert (stream.rate, stream.bit_rate) == (44100, 128_000)


def test_the_engines_own_format_is_the_native_encoder() -> None:
    assert not open_output(Output("pcm"), RATE).threaded
    assert converted(Output("pcm", RATE), tone(0.1)) == tone(0.1)
