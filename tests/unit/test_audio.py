"""PCM and WAV framing, and the streaming encoders checked by decoding their output with PyAV (FFmpeg's decoders)."""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Iterator

import av
import numpy as np
import pytest
import soundfile as sf

from audio.encoding import (
    AUDIO_FORMATS,
    FEED_SLICE_SECONDS,
    MEDIA_TYPES,
    STREAMING_WAV_SIZE,
    AudioFormat,
    codec_sample_rate,
    encode_whole,
    open_encoder,
    pcm_to_wav,
    to_pcm16,
    wav_header,
    wav_to_pcm,
)

RATES = (24_000, 48_000)  # Kokoro and Qwen3-TTS; VoxCPM2
DEMUXERS: dict[AudioFormat, str] = {"wav": "wav", "mp3": "mp3", "opus": "ogg", "aac": "aac", "flac": "flac"}


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


# --- streaming encoders -------------------------------------------------------------------------------------------


def speech_like(samples: int, rate: int) -> np.ndarray:
    """Deterministic s16 test audio: a few harmonics under a syllable-rate envelope, like voiced speech."""
    t = np.arange(samples) / rate
    voice = sum(np.sin(2 * np.pi * f * t) / (i + 1) for i, f in enumerate((180.0, 360.0, 540.0, 1250.0)))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t)
    return np.frombuffer(to_pcm16(0.3 * envelope * voice), "<i2")


def decode(data: bytes, fmt: AudioFormat, rate: int) -> tuple[np.ndarray, int]:
    """All the samples FFmpeg decodes from `data` as s16 mono, and their rate; nothing decodable is no samples."""
    if fmt == "pcm":
        return np.frombuffer(data, "<i2"), rate
    to_s16 = av.AudioResampler(format="s16", layout="mono")
    parts: list[np.ndarray] = []
    decoded_rate = rate
    try:
        with av.open(io.BytesIO(data), mode="r", format=DEMUXERS[fmt]) as container:
            for frame in container.decode(audio=0):
                decoded_rate = frame.sample_rate
                parts.extend(f.to_ndarray().reshape(-1) for f in to_s16.resample(frame))
    except (av.error.InvalidDataError, av.error.EOFError):
        if parts:
            raise
    return (np.concatenate(parts) if parts else np.zeros(0, np.int16)), decoded_rate


def priming(fmt: AudioFormat, rate: int) -> int:
    """Samples of silence a decoder puts before the audio because the stream cannot say to skip them.

    Ogg Opus says so (OpusHead pre-skip, and the last granule position trims the end), FLAC, WAV and PCM have none.
    ADTS has no field for it: FFmpeg's AAC encoder primes 1024 samples. A streamed MP3 has no LAME tag (that needs a
    seekable output): LAME's 576-sample encoder delay plus the 529-sample delay of the decoder.
    """
    return {"aac": 1024, "mp3": 576 + 529}.get(fmt, 0)


def frame_size(fmt: AudioFormat, rate: int) -> int:
    """Samples per codec frame: the unit a lossy stream is padded to at its end."""
    if fmt == "mp3":
        return 1152 if rate >= 32_000 else 576  # MPEG-1 Layer III at 32 kHz and up, MPEG-2 below
    return {"aac": 1024}.get(fmt, 1)


def assert_decodes_to(data: bytes, fmt: AudioFormat, pcm: np.ndarray, rate: int) -> None:
    """The stream decodes to `pcm`: exactly for the lossless formats and Ogg Opus's sample count; for MP3 and AAC,
    priming plus the input plus less than the end padding the codec adds (a frame, LAME at most one more)."""
    decoded, decoded_rate = decode(data, fmt, rate)
    fed = pcm.size * decoded_rate // rate
    assert fed * rate == pcm.size * decoded_rate, "test rates divide each other"
    skip = priming(fmt, decoded_rate)
    padding = decoded.size - skip - fed
    allowed = 2 * frame_size(fmt, decoded_rate) if fmt == "mp3" else frame_size(fmt, decoded_rate)
    assert 0 <= padding < allowed, f"{fmt}: decoded {decoded.size} samples for {fed} fed (priming {skip})"
    if fmt in ("pcm", "wav", "flac"):
        assert np.array_equal(decoded, pcm)
    elif pcm.size >= rate // 5:
        # Lossy: the audio is the input, where priming said it would be (resampled to the decoder's rate).
        original = np.interp(np.arange(fed) * rate / decoded_rate, np.arange(pcm.size), pcm.astype(np.float64))
        aligned = decoded[skip : skip + fed].astype(np.float64)
        similarity = float(aligned @ original / (np.linalg.norm(aligned) * np.linalg.norm(original)))
        assert similarity > 0.99, f"{fmt}: decoded audio correlates {similarity:.3f} with the input"


def in_chunks(data: bytes, sizes: Iterator[int]) -> Iterator[bytes]:
    start = 0
    for size in sizes:
        if start >= len(data):
            return
        yield data[start : start + size]
        start += size


CHUNKINGS = {
    # name: (seconds of audio, chunk sizes in bytes given the rate)
    "one_sample": (0.05, lambda rate: itertools.repeat(2)),
    "seven_samples": (0.5, lambda rate: itertools.repeat(14)),
    "ten_seconds_at_once": (10.0, lambda rate: itertools.repeat(20 * rate)),
    "mixed_and_split_mid_sample": (3.0, lambda rate: itertools.cycle([2, 14, 9599, 3, 320, 2 * rate, 1, 48_001])),
}


@pytest.mark.parametrize("chunking", CHUNKINGS)
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_fed_in_odd_chunks_decodes_to_what_was_fed(fmt: AudioFormat, rate: int, chunking: str) -> None:
    seconds, sizes = CHUNKINGS[chunking]
    pcm = speech_like(int(seconds * rate), rate)
    encoder = open_encoder(fmt, rate)
    out = b"".join(encoder.feed(chunk) for chunk in in_chunks(pcm.tobytes(), sizes(rate))) + encoder.finish()
    assert_decodes_to(out, fmt, pcm, rate)


@pytest.mark.parametrize("samples", [1, 7])
@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_a_stream_of_a_few_samples_is_complete(fmt: AudioFormat, samples: int) -> None:
    pcm = speech_like(samples, 24_000)
    encoder = open_encoder(fmt, 24_000)
    assert_decodes_to(encoder.feed(pcm.tobytes()) + encoder.finish(), fmt, pcm, 24_000)


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_a_stream_without_audio_holds_no_samples(fmt: AudioFormat) -> None:
    encoder = open_encoder(fmt, 24_000)
    out = encoder.feed(b"") + encoder.finish()
    assert decode(out, fmt, 24_000)[0].size == 0


def test_the_container_header_is_ready_before_any_audio() -> None:
    """A response can send it while the first audio is being synthesized; MP3, ADTS and PCM have none."""
    headers = {fmt: open_encoder(fmt, 24_000).feed(b"") for fmt in AUDIO_FORMATS}
    assert headers["opus"].startswith(b"OggS") and b"OpusHead" in headers["opus"] and b"OpusTags" in headers["opus"]
    assert headers["flac"].startswith(b"fLaC") and headers["wav"].startswith(b"RIFF")
    assert headers["mp3"] == headers["aac"] == headers["pcm"] == b""


def held_back(fmt: AudioFormat, rate: int) -> int:
    """The most input samples an encoder may still hold after a feed: what its codec holds, never the container.

    FLAC: one block (96 ms). Opus: the 60 ms frame being gathered and the packet the Ogg muxer keeps open until the
    next one, plus 6.5 ms look-ahead. AAC: three 1024-sample frames (the one being gathered, the encoder's look-ahead
    frame, its priming). MP3: six frames (LAME's encoder delay and look-ahead, FFmpeg's wait for a whole frame, the one
    being gathered); about 140 ms. Measured at both rates over feeds of 50-333 ms.
    """
    return {
        "flac": math.ceil(0.096 * rate),
        "opus": math.ceil(0.1265 * rate),
        "aac": 3 * frame_size("aac", rate),
        "mp3": 6 * frame_size("mp3", rate),
    }.get(fmt, 0)


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_each_feed_returns_what_the_codec_has_ready(fmt: AudioFormat, rate: int) -> None:
    """After every 200 ms fed, the bytes returned so far decode to all of it but what the codec itself holds."""
    step = rate // 5
    pcm = speech_like(2 * rate, rate)
    encoder = open_encoder(fmt, rate)
    out = b""
    for start in range(0, pcm.size, step):
        out += encoder.feed(pcm[start : start + step].tobytes())
        decoded, decoded_rate = decode(out, fmt, rate)
        audio_out = (decoded.size - priming(fmt, decoded_rate)) * rate // decoded_rate
        fed = start + step
        assert audio_out > 0, f"{fmt}: nothing decodable after the first {fed} samples"
        assert fed - audio_out <= held_back(fmt, rate), f"{fmt}: {fed - audio_out} of {fed} samples held back"
    encoder.finish()


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_a_long_piece_fed_in_slices_leaves_slice_by_slice(fmt: AudioFormat) -> None:
    """The first bytes of a 3 s piece leave after its first 0.2 s slice is encoded, not after all 3 s."""
    rate = 24_000
    pcm = speech_like(3 * rate, rate)
    encoder = open_encoder(fmt, rate)
    outputs = list(encoder.feed_sliced(pcm.tobytes()))
    assert all(outputs)
    if fmt in ("pcm", "wav"):
        assert len(outputs) == 1  # nothing to wait for: the piece passes whole
    else:
        assert len(outputs) >= 3 / FEED_SLICE_SECONDS - 1
        first, _ = decode(outputs[0], fmt, rate)
        assert first.size > 0
    assert_decodes_to(b"".join(outputs) + encoder.finish(), fmt, pcm, rate)


def test_a_streamed_wav_header_is_the_one_ffmpeg_writes_to_a_pipe() -> None:
    """Length unknown: RIFF and data sizes 0xFFFFFFFF, byte for byte what FFmpeg's wav muxer sends unseekable."""

    class Pipe:
        def __init__(self) -> None:
            self.data = b""

        def write(self, data: bytes) -> int:
            self.data += data
            return len(data)

    pipe = Pipe()
    with av.open(pipe, mode="w", format="wav") as container:
        # No LIST/INFO "encoder" chunk. PyAV's stub types a flag's value as the flag; it is an int.
        container.flags |= av.container.Flags.bitexact.value  # type: ignore[operator]
        container.add_stream("pcm_s16le", rate=24_000, layout="mono")
        container.start_encoding()
    encoder = open_encoder("wav", 24_000)
    pcm = speech_like(24_000, 24_000).tobytes()
    first = encoder.feed(pcm[:1000])
    assert first[:44] == pipe.data[:44] and first[44:] == pcm[:1000]
    assert int.from_bytes(first[4:8], "little") == int.from_bytes(first[40:44], "little") == STREAMING_WAV_SIZE
    streamed = first + encoder.feed(pcm[1000:]) + encoder.finish()
    decoded, rate = sf.read(io.BytesIO(streamed), dtype="int16")  # libsndfile reads to the end as well
    assert rate == 24_000 and decoded.tobytes() == pcm


def test_a_wav_streamed_without_audio_is_just_its_header() -> None:
    header = open_encoder("wav", 16_000).finish()
    assert len(header) == 44 and header[8:40] == wav_header(16_000, 0)[8:40]
    assert sf.info(io.BytesIO(header)).frames == 0


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_encode_whole_decodes_to_its_input(fmt: AudioFormat) -> None:
    pcm = speech_like(36_000, 24_000)
    whole = encode_whole(fmt, pcm.tobytes(), 24_000)
    assert_decodes_to(whole, fmt, pcm, 24_000)


def test_encode_whole_wav_is_the_exact_length_wav_post_tts_sends() -> None:
    pcm = speech_like(1234, 24_000).tobytes()
    assert encode_whole("wav", pcm, 24_000) == pcm_to_wav(pcm, 24_000)
    assert encode_whole("pcm", pcm, 24_000) == pcm


@pytest.mark.parametrize(
    ("fmt", "rate", "encoded_at"),
    [
        ("opus", 22_050, 24_000),
        ("opus", 44_100, 48_000),
        ("opus", 16_000, 16_000),
        ("mp3", 96_000, 48_000),
        ("aac", 22_050, 22_050),
        ("flac", 22_050, 22_050),
        ("wav", 22_050, 22_050),
        ("pcm", 11_025, 11_025),
    ],
)
def test_a_rate_the_codec_does_not_take_is_resampled_on_the_way_in(
    fmt: AudioFormat, rate: int, encoded_at: int
) -> None:
    assert codec_sample_rate(fmt, rate) == encoded_at
    pcm = speech_like(rate, rate)  # one second
    encoder = open_encoder(fmt, rate)
    out = encoder.feed(pcm.tobytes()) + encoder.finish()
    decoded, decoded_rate = decode(out, fmt, rate)
    seconds = (decoded.size - priming(fmt, decoded_rate)) / decoded_rate
    assert 1.0 <= seconds < 1.0 + 2 * frame_size(fmt, decoded_rate) / decoded_rate + 0.001


def test_every_format_has_its_media_type() -> None:
    assert set(MEDIA_TYPES) == set(AUDIO_FORMATS)
    for fmt in AUDIO_FORMATS:
        assert open_encoder(fmt, 24_000).media_type == MEDIA_TYPES[fmt]
    assert MEDIA_TYPES["mp3"] == "audio/mpeg" and MEDIA_TYPES["opus"] == "audio/ogg"


def test_bad_arguments_and_misuse_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown audio format"):
        open_encoder("ogg", 24_000)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sample rate"):
        open_encoder("mp3", 0)
    encoder = open_encoder("mp3", 24_000)
    encoder.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        encoder.feed(b"\0\0")
    encoder.close()  # closing a finished or abandoned encoder is harmless, twice too
    abandoned = open_encoder("opus", 48_000)
    abandoned.feed(speech_like(4800, 48_000).tobytes())
    abandoned.close()
    abandoned.close()
