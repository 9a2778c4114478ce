"""Audio framing and encoding: float32 samples to s16le PCM, WAV framing, and streaming encoders.

One `Encoder` per response turns s16le mono PCM, fed as the engine produces it, into the bytes of one format:
`pcm` (the samples as they are), `wav` (a header, then the samples), and `mp3`, `opus` (in Ogg), `aac` (ADTS) and
`flac` through PyAV: FFmpeg's codecs and muxers inside the `av` wheel, one container per response, no subprocess.
"""

from __future__ import annotations

import struct
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, get_args

import av
import numpy as np

SAMPLE_WIDTH = 2  # bytes per s16le sample
WAV_HEADER_BYTES = 44
FEED_SLICE_SECONDS = 0.2
"""Audio per `Encoder.feed_sliced` step: a compressed format takes a few milliseconds to encode this much."""
STREAMING_WAV_SIZE = 0xFFFFFFFF
"""RIFF and data chunk size of a WAV whose length is not known when its header is sent: what FFmpeg's own wav
muxer writes to a pipe, and what FFmpeg (Chromium's decoder) and libsndfile read as "samples until the end"."""

AudioFormat = Literal["pcm", "wav", "mp3", "opus", "aac", "flac"]
AUDIO_FORMATS: tuple[AudioFormat, ...] = get_args(AudioFormat)

MEDIA_TYPES: dict[AudioFormat, str] = {
    # Headerless s16le has no registered media type: audio/L16 (RFC 2586) is big-endian, and audio/pcm is
    # unregistered. The native /tts/stream has always answered octet-stream, with the rate in X-Sample-Rate.
    "pcm": "application/octet-stream",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
}


def to_pcm16(samples: np.ndarray) -> bytes:
    """Mono float samples in [-1, 1] to little-endian 16-bit PCM (clipped, never wrapped)."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


WAV_PCM, WAV_FLOAT, WAV_ALAW, WAV_MULAW = 1, 3, 6, 7
"""WAVE format tags: integer PCM, IEEE float, G.711 A-law, G.711 μ-law."""


def _riff_header(
    sample_rate: int, riff_size: int, data_size: int, channels: int = 1, tag: int = WAV_PCM, width: int = SAMPLE_WIDTH
) -> bytes:
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        16,
        tag,
        channels,
        sample_rate,
        sample_rate * channels * width,
        channels * width,
        8 * width,
        b"data",
        data_size,
    )


def streaming_wav_header(sample_rate: int, tag: int = WAV_PCM, width: int = SAMPLE_WIDTH) -> bytes:
    """The header of a streamed WAV, whose length is not known when it is sent (STREAMING_WAV_SIZE)."""
    return _riff_header(sample_rate, STREAMING_WAV_SIZE, STREAMING_WAV_SIZE, tag=tag, width=width)


def wav_header(sample_rate: int, data_bytes: int, channels: int = 1) -> bytes:
    """The 44-byte RIFF/WAVE header of a 16-bit PCM file holding `data_bytes` bytes of samples."""
    return _riff_header(sample_rate, 36 + data_bytes, data_bytes, channels)


def pcm_to_wav(pcm: bytes, sample_rate: int) -> bytes:
    return wav_header(sample_rate, len(pcm)) + pcm


def wav_to_pcm(wav: bytes) -> bytes:
    """The samples of a WAV made by `pcm_to_wav`."""
    return wav[WAV_HEADER_BYTES:]


class Encoder(ABC):
    """Encodes one response: `feed` PCM as it arrives and send what it returns, then send what `finish` returns.

    Not thread-safe; one per response, used by one thread at a time (the codec calls release the GIL, so a worker
    thread can encode while the event loop serves). `close` releases an encoder that will not be finished.
    """

    media_type: str
    threaded = True
    """Whether a response encodes on a worker thread (a codec's work); what costs nothing runs in place."""

    @abstractmethod
    def feed(self, pcm: bytes) -> bytes:
        """Encode s16le mono samples; returns every byte the format has ready (possibly none)."""

    def feed_sliced(self, pcm: bytes) -> Iterator[bytes]:
        """`feed` a long piece a slice at a time, yielding each slice's bytes that are ready (never empty ones).

        A codec encoder takes FEED_SLICE_SECONDS of audio per step: the first bytes of a piece leave once its first
        slice is encoded, not the whole piece, and each step holds the caller's thread for a few milliseconds. PCM
        and WAV, which cost nothing, pass the piece through whole."""
        out = self.feed(pcm)
        if out:
            yield out

    @abstractmethod
    def finish(self) -> bytes:
        """The rest of the stream: what the codec still held, and the container's trailer."""

    def close(self) -> None:
        """Release the encoder without finishing the stream."""


class _PcmEncoder(Encoder):
    media_type = MEDIA_TYPES["pcm"]
    threaded = False

    def feed(self, pcm: bytes) -> bytes:
        return bytes(pcm)

    def finish(self) -> bytes:
        return b""


class _WavEncoder(Encoder):
    """A streamed WAV: the header (sizes unknown) goes out with the first bytes, then the samples as they come."""

    media_type = MEDIA_TYPES["wav"]
    threaded = False

    def __init__(self, sample_rate: int) -> None:
        self._header = streaming_wav_header(sample_rate)

    def feed(self, pcm: bytes) -> bytes:
        header, self._header = self._header, b""
        return header + pcm

    def finish(self) -> bytes:
        header, self._header = self._header, b""
        return header


@dataclass(frozen=True)
class _Codec:
    muxer: str
    codec: str
    bit_rate: int | None
    muxer_options: dict[str, str] = field(default_factory=dict)
    codec_options: dict[str, str] = field(default_factory=dict)


# Bit rates are for mono speech. Muxer options keep the container from holding what the codec has produced: no
# ID3 tag in front of the first MP3 frame (and no Xing frame: the output is not seekable); one Ogg page per Opus
# packet (a page closes once it spans more than 1 us; the default gathers a second of audio per page), so the muxer
# holds at most the newest packet; no 8 KiB padding block after FLAC's STREAMINFO. Opus takes 60 ms frames: with a
# page each, 20 ms frames spend a third of the stream on page headers and extra bits, 60 ms ones about a tenth.
_CODECS: dict[AudioFormat, _Codec] = {
    "mp3": _Codec("mp3", "libmp3lame", 64_000, {"id3v2_version": "0"}),
    "opus": _Codec("ogg", "libopus", 32_000, {"page_duration": "1"}, {"frame_duration": "60"}),
    "aac": _Codec("adts", "aac", 64_000),
    "flac": _Codec("flac", "flac", None, {"metadata_header_padding": "0"}),
}


def codec_sample_rate(fmt: AudioFormat, sample_rate: int) -> int:
    """The rate a format is encoded at: the input's when the codec takes it, else the nearest rate above it that the
    codec takes (the highest when there is none), e.g. 22050 Hz goes into Opus at 24000 Hz. PCM and WAV keep it."""
    codec = _CODECS.get(fmt)
    rates = av.Codec(codec.codec, "w").audio_rates if codec else None
    if not rates or sample_rate in rates:
        return sample_rate
    above = [rate for rate in rates if rate >= sample_rate]
    return min(above) if above else max(rates)


class _Sink:
    """Where the muxer writes; not seekable, so muxers never hold bytes back to patch them later."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def write(self, data: bytes) -> int:
        self._buffer += data
        return len(data)

    def take(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out


class _AvEncoder(Encoder):
    """One PyAV output container with one mono audio stream; each muxed packet is flushed to the sink at once."""

    def __init__(self, fmt: AudioFormat, sample_rate: int, bit_rate: int | None = None) -> None:
        codec = _CODECS[fmt]
        self.media_type = MEDIA_TYPES[fmt]
        self._rate = sample_rate
        self._time_base = Fraction(1, sample_rate)
        self._slice_bytes = max(1, round(FEED_SLICE_SECONDS * sample_rate)) * SAMPLE_WIDTH
        self._samples = 0
        self._odd_byte = b""
        self._finished = False
        # A request cancelled while a worker thread encodes closes the encoder from the event loop: closing waits
        # for that step, since FFmpeg crashes the process when a container is freed under a running encode.
        self._lock = threading.Lock()
        self._sink = _Sink()
        self._container = av.open(self._sink, mode="w", format=codec.muxer, options=codec.muxer_options)
        try:
            # PyAV's stub types a flag's .value as the flag itself; at run time it is the int that `flags` holds.
            self._container.flags |= av.container.Flags.flush_packets.value  # type: ignore[operator]
            stream = self._container.add_stream(
                codec.codec, rate=codec_sample_rate(fmt, sample_rate), options=codec.codec_options
            )
            # Every codec in _CODECS is an audio codec; the check tells the type checker which stream it made.
            assert isinstance(stream, av.AudioStream), stream
            self._stream = stream
            self._stream.layout = "mono"
            if chosen := bit_rate or codec.bit_rate:
                self._stream.bit_rate = chosen
            # Opens the codec and writes the container's header now: the first feed returns it, even an empty feed
            # made before any PCM exists, so a response can send it while the first audio is being synthesized.
            self._container.start_encoding()
        except BaseException:
            self._container.close()
            raise

    def feed(self, pcm: bytes) -> bytes:
        with self._lock:
            return self._feed(pcm)

    def _feed(self, pcm: bytes) -> bytes:
        if self._finished:
            raise RuntimeError("feed after finish: this encoder's stream is complete")
        data = self._odd_byte + pcm if self._odd_byte else pcm
        whole = len(data) - len(data) % SAMPLE_WIDTH
        self._odd_byte = data[whole:]
        if whole:
            samples = np.frombuffer(data, dtype="<i2", count=whole // SAMPLE_WIDTH).astype(np.int16, copy=False)
            frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = self._rate
            frame.time_base = self._time_base
            frame.pts = self._samples
            self._samples += samples.size
            self._mux(frame)
        return self._sink.take()

    def feed_sliced(self, pcm: bytes) -> Iterator[bytes]:
        step = self._slice_bytes
        for start in range(0, len(pcm), step):
            out = self.feed(pcm[start : start + step])
            if out:
                yield out

    def finish(self) -> bytes:
        with self._lock:
            if self._finished:
                raise RuntimeError("finish called twice")
            self._finished = True
            self._mux(None)  # a half sample left over is dropped: it is not a sample
            self._container.close()
            return self._sink.take()

    def close(self) -> None:
        with self._lock:
            self._finished = True  # nothing is fed after this, not even by a step already queued on a worker
            self._container.close()

    def _mux(self, frame: av.AudioFrame | None) -> None:
        # PyAV converts to the codec's sample format, rate and frame size on the way in (its own resampler).
        for packet in self._stream.encode(frame):
            self._container.mux(packet)


def open_encoder(fmt: AudioFormat, sample_rate: int, bit_rate: int | None = None) -> Encoder:
    """A fresh encoder of s16le mono PCM at `sample_rate` into `fmt` (a codec at `bit_rate`, else its own)."""
    if fmt not in AUDIO_FORMATS:
        raise ValueError(f"unknown audio format {fmt!r}; one of {', '.join(AUDIO_FORMATS)}")
    if sample_rate <= 0:
        raise ValueError(f"sample rate must be positive, got {sample_rate}")
    if fmt == "pcm":
        return _PcmEncoder()
    if fmt == "wav":
        return _WavEncoder(sample_rate)
    return _AvEncoder(fmt, sample_rate, bit_rate)


def encode_whole(fmt: AudioFormat, pcm: bytes, sample_rate: int) -> bytes:
    """All of a finished synthesis in one format. WAV carries its exact length (what POST /tts has always sent)."""
    if fmt == "wav":
        return pcm_to_wav(pcm, sample_rate)
    encoder = open_encoder(fmt, sample_rate)
    whole = encoder.feed(pcm) + encoder.finish()
    return with_flac_length(whole, len(pcm) // SAMPLE_WIDTH) if fmt == "flac" else whole


_STREAMINFO_LENGTH = slice(18, 26)
"""The bytes of a FLAC file's STREAMINFO (after `fLaC` and the block's header) that end with its total samples."""
_TOTAL_SAMPLES_BITS = 36


def with_flac_length(flac: bytes, samples: int) -> bytes:
    """A FLAC file whose STREAMINFO says how many samples it holds. An encoder writing to a socket cannot go back to
    write it, so a stream says 0 (unknown, as FLAC allows); a whole file must say it, or decoders that size their
    reads from it (libsndfile: python-soundfile) take it for one of 2^63 samples."""
    field = int.from_bytes(flac[_STREAMINFO_LENGTH], "big")
    field = field >> _TOTAL_SAMPLES_BITS << _TOTAL_SAMPLES_BITS | samples
    return flac[: _STREAMINFO_LENGTH.start] + field.to_bytes(8, "big") + flac[_STREAMINFO_LENGTH.stop :]
