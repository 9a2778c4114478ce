"""Audio as a client asks for it, whatever the engine's rate: s16le mono PCM, fed as it is made, converted to another
sample rate and then to raw samples (s16le, f32le or G.711 μ-law or A-law) or into a codec at a chosen bit rate.

`open_output(Output(...), engine_rate)` is the one entry point of the compatible fronts (ElevenLabs' `pcm_16000`,
`ulaw_8000`, `mp3_44100_128`; Cartesia's raw `pcm_f32le` at a rate): one `Encoder` per response, as
`audio.encoding.open_encoder` gives for the native formats. The resampler keeps its filter's state from one piece to
the next, so a stream converted piece by piece is the stream converted whole (no click at a piece's edge).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import av
import numpy as np

from audio.encoding import (
    MEDIA_TYPES,
    SAMPLE_WIDTH,
    WAV_ALAW,
    WAV_FLOAT,
    WAV_MULAW,
    WAV_PCM,
    AudioFormat,
    Encoder,
    open_encoder,
    streaming_wav_header,
)

SampleEncoding = Literal["s16le", "f32le", "mulaw", "alaw"]
"""How the samples of raw audio (`pcm`) are written: 16-bit and 32-bit float little-endian, or 8-bit G.711 μ-law or
A-law."""


@dataclass(frozen=True)
class Output:
    """What a client asked for: a format, at a rate (None: the engine's), samples written as `encoding` (for `pcm`
    and `wav` only), and a codec's bit rate (None: the format's default)."""

    fmt: AudioFormat
    sample_rate: int | None = None
    encoding: SampleEncoding = "s16le"
    bit_rate: int | None = None

    def rate(self, engine_rate: int) -> int:
        return self.sample_rate or engine_rate

    @property
    def media_type(self) -> str:
        """Its media type: raw G.711 samples have their own (`G711_MEDIA_TYPES`), anything else its format's."""
        if self.fmt == "pcm":
            return G711_MEDIA_TYPES.get(self.encoding, MEDIA_TYPES["pcm"])
        return MEDIA_TYPES[self.fmt]


class Resampler:
    """s16le mono from one rate to another, piece by piece (FFmpeg's swresample through PyAV, which keeps its
    filter's history between pieces); `finish` returns the samples it still holds."""

    def __init__(self, rate_in: int, rate_out: int) -> None:
        self.rate_in = rate_in
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=rate_out)
        self._odd_byte = b""
        self._pts = 0

    def feed(self, pcm: bytes) -> bytes:
        data = self._odd_byte + pcm if self._odd_byte else pcm
        whole = len(data) - len(data) % SAMPLE_WIDTH
        self._odd_byte = data[whole:]
        if not whole:
            return b""
        samples = np.frombuffer(data, dtype="<i2", count=whole // SAMPLE_WIDTH)
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate_in
        frame.pts = self._pts
        self._pts += samples.size
        return self._collect(self._resampler.resample(frame))

    def finish(self) -> bytes:
        return self._collect(self._resampler.resample(None))

    @staticmethod
    def _collect(frames: list[av.AudioFrame]) -> bytes:
        return b"".join(frame.to_ndarray().astype("<i2", copy=False).tobytes() for frame in frames)


_MULAW_BIAS = 0x21
_MULAW_CLIP = 8159
_MULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])


def mulaw(pcm: bytes) -> bytes:
    """s16le samples as G.711 μ-law bytes (one per sample), as telephony (and ElevenLabs' `ulaw_8000`) carries them:
    the reference encoder's arithmetic on 14-bit samples, byte for byte."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.int32) >> 2
    negative = samples < 0
    magnitude = np.minimum(np.where(negative, -samples, samples), _MULAW_CLIP) + _MULAW_BIAS
    segment = np.searchsorted(_MULAW_SEGMENT_ENDS, magnitude)
    value = np.where(segment > 7, 0x7F, (segment << 4) | ((magnitude >> (segment + 1)) & 0x0F))
    return (value ^ np.where(negative, 0x7F, 0xFF)).astype(np.uint8).tobytes()


_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


def alaw(pcm: bytes) -> bytes:
    """s16le samples as G.711 A-law bytes (one per sample), as European telephony carries them: the reference
    encoder's arithmetic on 13-bit samples, byte for byte."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.int32) >> 3
    negative = samples < 0
    magnitude = np.where(negative, -samples - 1, samples)
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude)
    mantissa = (magnitude >> np.where(segment < 2, 1, segment)) & 0x0F
    value = np.where(segment > 7, 0x7F, (segment << 4) | mantissa)
    return (value ^ np.where(negative, 0x55, 0xD5)).astype(np.uint8).tobytes()


def f32le(pcm: bytes) -> bytes:
    """s16le samples as 32-bit float little-endian in [-1, 1)."""
    return (np.frombuffer(pcm, dtype="<i2").astype("<f4") / 32768.0).astype("<f4").tobytes()


G711_MEDIA_TYPES: dict[SampleEncoding, str] = {"mulaw": "audio/basic", "alaw": "audio/x-alaw-basic"}
"""The media types of raw G.711 samples (RFC 2046's audio/basic is 8 kHz μ-law; A-law has only this common one)."""

_RAW: dict[SampleEncoding, Callable[[bytes], bytes]] = {"s16le": bytes, "f32le": f32le, "mulaw": mulaw, "alaw": alaw}
_WAV_FORMATS: dict[SampleEncoding, tuple[int, int]] = {
    "s16le": (WAV_PCM, SAMPLE_WIDTH),
    "f32le": (WAV_FLOAT, 4),
    "mulaw": (WAV_MULAW, 1),
    "alaw": (WAV_ALAW, 1),
}
"""Each sample encoding's WAVE format tag and bytes per sample."""


class _Converted(Encoder):
    """Resampled (where the rates differ), then written raw or fed to the format's encoder."""

    def __init__(self, output: Output, engine_rate: int) -> None:
        rate = output.rate(engine_rate)
        self.media_type = MEDIA_TYPES[output.fmt]
        self._resampler = Resampler(engine_rate, rate) if rate != engine_rate else None
        raw = output.fmt in ("pcm", "wav")
        self._raw = _RAW[output.encoding] if raw else None
        self._inner = None if raw else open_encoder(output.fmt, rate, output.bit_rate)
        self._odd_byte = b""
        self._header = streaming_wav_header(rate, *_WAV_FORMATS[output.encoding]) if output.fmt == "wav" else b""

    def _convert(self, pcm: bytes) -> bytes:
        return self._resampler.feed(pcm) if self._resampler else pcm

    def _write(self, pcm: bytes) -> Iterator[bytes]:
        if self._raw is not None:
            data = self._odd_byte + pcm
            whole = len(data) - len(data) % SAMPLE_WIDTH
            self._odd_byte = data[whole:]
            if whole:
                yield self._raw(data[:whole])
        elif self._inner is not None:
            yield from self._inner.feed_sliced(pcm)

    def feed(self, pcm: bytes) -> bytes:
        header, self._header = self._header, b""
        return header + b"".join(self._write(self._convert(pcm)))

    def feed_sliced(self, pcm: bytes) -> Iterator[bytes]:
        if self._raw is not None:
            if out := self.feed(pcm):
                yield out
            return
        yield from self._write(self._convert(pcm))

    def finish(self) -> bytes:
        header, self._header = self._header, b""
        tail = header + (b"".join(self._write(self._resampler.finish())) if self._resampler else b"")
        return tail + (self._inner.finish() if self._inner is not None else b"")

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


def open_output(output: Output, engine_rate: int) -> Encoder:
    """A fresh encoder of the engine's s16le mono PCM (at `engine_rate`) into what `output` asks for."""
    if output.sample_rate is not None and output.sample_rate <= 0:
        raise ValueError(f"sample rate must be positive, got {output.sample_rate}")
    if output.rate(engine_rate) == engine_rate and output.encoding == "s16le" and output.bit_rate is None:
        return open_encoder(output.fmt, engine_rate)
    return _Converted(output, engine_rate)
