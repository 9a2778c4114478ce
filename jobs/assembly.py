"""A job's finished audio, made from its pieces' PCM: the whole file (with chapter marks in m4a and m4b) or one
chapter, in the job's format."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import BinaryIO, Literal, get_args

import av
import numpy as np

from audio.encoding import AUDIO_FORMATS, MEDIA_TYPES, open_encoder, wav_header

JobFormat = Literal["wav", "flac", "mp3", "opus", "m4a", "m4b"]
JOB_FORMATS: tuple[JobFormat, ...] = get_args(JobFormat)
JOB_MEDIA_TYPES: dict[str, str] = {
    **{fmt: MEDIA_TYPES[fmt] for fmt in JOB_FORMATS if fmt in AUDIO_FORMATS},
    "m4a": "audio/mp4",
    "m4b": "audio/mp4",
}
MP4_BIT_RATE = 64_000
"""AAC in m4a and m4b, as ADTS AAC is elsewhere: mono speech."""
MP4_FRAME_SAMPLES = 24_000
"""PCM handed to the AAC encoder at a time."""
READ_BYTES = 1024 * 1024

Chapter = tuple[str, int, int]
"""A chapter's title and its first and end sample."""


def encode(
    fmt: str, sample_rate: int, parts: list[int], read: Callable[[int], bytes], chapters: list[Chapter]
) -> Iterator[bytes]:
    """The bytes of a file in `fmt` holding the PCM of `parts` (piece numbers, read by `read`) in order: WAV with its
    exact length, m4a and m4b with `chapters` marked, the other formats through their streaming encoder."""
    if fmt == "wav":
        total = sum(end - start for _, start, end in chapters) * 2
        yield wav_header(sample_rate, total)
        for seq in parts:
            yield read(seq)
    elif fmt in ("m4a", "m4b"):
        yield from _mp4(sample_rate, parts, read, chapters)
    else:
        assert fmt in AUDIO_FORMATS, fmt
        encoder = open_encoder(fmt, sample_rate)
        try:
            yield encoder.feed(b"")
            for seq in parts:
                yield encoder.feed(read(seq))
            yield encoder.finish()
        finally:
            encoder.close()


def _mp4(sample_rate: int, parts: list[int], read: Callable[[int], bytes], chapters: list[Chapter]) -> Iterator[bytes]:
    """AAC in an MP4 container (the `ipod` muxer: what players read as m4a and m4b audiobooks), one chapter mark per
    chapter. Muxed into a temporary file first, since the muxer seeks back to write its index (a book's file is too
    large to hold in memory)."""
    with tempfile.TemporaryFile() as sink:
        _mux_mp4(sink, sample_rate, parts, read, chapters)
        sink.seek(0)
        while data := sink.read(READ_BYTES):
            yield data


def _mux_mp4(
    sink: BinaryIO, sample_rate: int, parts: list[int], read: Callable[[int], bytes], chapters: list[Chapter]
) -> None:
    """The parts' PCM as AAC into `sink` (a seekable file), `chapters` marked."""
    time_base = Fraction(1, sample_rate)
    with av.open(sink, mode="w", format="ipod") as container:
        stream = container.add_stream("aac", rate=sample_rate)
        assert isinstance(stream, av.AudioStream), stream
        stream.layout = "mono"
        stream.bit_rate = MP4_BIT_RATE
        container.set_chapters(
            [
                {"id": n + 1, "start": start, "end": end, "time_base": time_base, "metadata": {"title": title}}
                for n, (title, start, end) in enumerate(chapters)
            ]
        )
        pts = 0
        for seq in parts:
            samples = np.frombuffer(read(seq), dtype="<i2")
            for start in range(0, len(samples), MP4_FRAME_SAMPLES):
                block = samples[start : start + MP4_FRAME_SAMPLES].reshape(1, -1)
                frame = av.AudioFrame.from_ndarray(block, format="s16", layout="mono")
                frame.sample_rate, frame.time_base, frame.pts = sample_rate, time_base, pts
                pts += block.shape[1]
                for packet in stream.encode(frame):
                    container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
