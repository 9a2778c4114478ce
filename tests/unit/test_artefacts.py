"""Per-voice files as engines read them back: damaged prepared artefacts are rebuilt, damaged clips are the voice's
own error, logged once."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from engines.artefacts import load_array, read_clip, read_npy, save_array, usable_clip
from engines.base import EngineCaps
from engines.qwen.mlx_backend import MlxQwenEngine
from engines.voxcpm.engine import VoxCPMEngine
from errors import ServiceError
from tests.support.clips import wav_clip
from tests.support.voices import npy
from voicebank.registration import Registration
from voicebank.registry import VoiceRegistry
from voicebank.voice_entry import VoiceEntry


def header_only(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    """An .npy header describing `shape`, with none of its data."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": dtype, "fortran_order": False, "shape": shape})
    return out.getvalue()


GOOD = np.arange(1000, dtype=np.float32)
DAMAGED = {
    "cut short": npy(GOOD)[:-8],
    "emptied": b"",
    "random bytes": np.random.default_rng(0).bytes(4128),
    "longer than its header says": npy(GOOD) + b"\0" * 16,
    "header claims a huge shape": header_only((10**12,)) + b"\0" * 4000,
    "header not a literal": npy(GOOD).replace(b"(1000,)", b"(10**3)"),
    "pickled objects": npy(np.array([{"a": 1}], dtype=object), allow_pickle=True),
    "NaN": npy(np.full(10, np.nan, np.float32)),
}


def test_a_prepared_array_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "prompts" / "k" / "reference.npy"
    assert load_array(path) is None
    save_array(path, GOOD)
    np.testing.assert_array_equal(load_array(path), GOOD)
    codes = np.arange(12, dtype=np.int32).reshape(3, 4)
    save_array(path, codes)
    np.testing.assert_array_equal(load_array(path), codes)


@pytest.mark.parametrize("data", list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_damaged_prepared_array_is_removed_to_be_made_again(
    tmp_path: Path, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "reference.npy"
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="polytts.artefacts"):
        assert load_array(path) is None
    assert not path.exists()
    assert len(caplog.records) == 1 and "reference.npy" in caplog.records[0].getMessage()
    assert caplog.records[0].exc_info is None


def test_read_npy_refuses_a_huge_claim_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    path.write_bytes(header_only((10**12, 10**6)) + b"\0" * 64)
    with pytest.raises(ValueError, match="where its header describes"):
        read_npy(path, 1 << 20)
    path.write_bytes(npy(GOOD))
    with pytest.raises(ValueError, match="more than"):
        read_npy(path, 100)


def test_a_damaged_prepared_clip_is_removed_to_be_made_again(tmp_path: Path) -> None:
    path = tmp_path / "reference.wav"
    assert not usable_clip(path)
    path.write_bytes(wav_clip(0.5))
    assert usable_clip(path)
    for damage in (b"", b"RIFF\x00\x00\x00\x00WAVE", path.read_bytes()[:44]):
        path.write_bytes(damage)
        assert not usable_clip(path) and not path.exists()


def voice_clip(tmp_path: Path, data: bytes) -> Path:
    folder = tmp_path / "0123456789abcdef"
    folder.mkdir(exist_ok=True)
    (folder / "voice.wav").write_bytes(data)
    return folder / "voice.wav"


def test_read_clip_mixes_down_and_cuts(tmp_path: Path) -> None:
    stereo = io.BytesIO()
    sf.write(stereo, np.stack([np.full(16_000, 0.5), np.full(16_000, -0.1)], axis=1), 16_000, format="WAV")
    samples, rate = read_clip(voice_clip(tmp_path, stereo.getvalue()), 0.25)
    assert rate == 16_000 and samples.shape == (4000,)
    np.testing.assert_allclose(samples, 0.2, atol=1e-3)


@pytest.mark.parametrize("data", [b"", b"not audio at all", wav_clip(1.0)[:44]], ids=["empty", "garbage", "no frames"])
def test_a_damaged_registered_clip_is_the_voices_own_error(
    tmp_path: Path, data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = voice_clip(tmp_path, data)
    with caplog.at_level(logging.WARNING, logger="polytts.artefacts"):
        for _ in range(3):
            with pytest.raises(ServiceError) as caught:
                read_clip(path, 10.0)
            assert caught.value.status == 500 and caught.value.code == "voice_damaged"
            assert "0123456789abcdef" in caught.value.message
    assert len(caplog.records) == 1
    assert path.read_bytes() == data  # left for the operator


# --- the engines that read these files back --------------------------------------------------------------------------


@pytest.fixture
def clone(tmp_path: Path) -> VoiceEntry:
    registry = VoiceRegistry(tmp_path / "voices")
    return registry.register(Registration(audio=wav_clip(3.0), engine="voxcpm", ref_text="hello"))[0]


def test_voxcpm_makes_a_damaged_trimmed_clip_again(tmp_path: Path, clone: VoiceEntry) -> None:
    engine = VoxCPMEngine(
        model=str(tmp_path / "weights"),
        runtime="cpu",
        denoiser=None,
        max_ref_seconds=2.0,
        max_len=16,
        caps=EngineCaps(0, 80, 3, interleavable=False),
    )
    prompt = engine.prepare_voice(clone)  # no model needed: the clips are cut before the model sees them
    prompt.reference.write_bytes(b"RIFF\x00\x00")
    again = engine.prepare_voice(clone)
    assert sf.info(str(again.reference)).frames == 32_000
    clone.audio_path.write_bytes(b"damaged")
    again.reference.unlink()
    with pytest.raises(ServiceError) as caught:
        engine.prepare_voice(clone)
    assert caught.value.code == "voice_damaged"


def test_mlx_engines_make_a_damaged_resampled_clip_again(tmp_path: Path, clone: VoiceEntry) -> None:
    engine = MlxQwenEngine(
        model=str(tmp_path / "weights"),
        cache_mb=64,
        max_voices=2,
        max_ref_seconds=2.0,
        max_tokens=8,
        stream_interval=0.32,
        caps=EngineCaps(0, 300, 0, interleavable=False),
    )
    cached = tmp_path / "reference.npy"
    first = engine.resampled_clip(clone.audio_path, cached)
    assert first.shape == (2 * engine.sample_rate,)
    cached.write_bytes(cached.read_bytes()[:-100])
    np.testing.assert_array_equal(engine.resampled_clip(clone.audio_path, cached), first)
    np.testing.assert_array_equal(load_array(cached), first)
