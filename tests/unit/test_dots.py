"""dots.tts on PyTorch on a tiny random checkpoint built at test time, loaded by the package's own from_pretrained."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file

import engines.torchaudio_ops as torchaudio_ops
from engines.base import BuiltinVoice, EngineCaps, EngineLoadError, SynthesisOptions
from engines.dots.engine import SPEC as DOTS
from engines.dots.engine import DotsEngine
from errors import InvalidInput
from settings import load_settings
from tests.support.clips import wav_clip
from tests.support.tiny_dots import SAMPLES_PER_PATCH
from text.languages import resolve_language
from voicebank.ids import compute_voice_id
from voicebank.registration import Registration
from voicebank.registry import VoiceRegistry
from voicebank.voice_entry import VoiceEntry

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models run fastest on one thread

MAX_PATCHES = 12  # the random model never stops: an x-vector generation fills all 12
REF_SECONDS = 0.5  # 12,000 samples at 24 kHz: the continuation path's prompt takes 7 of the patches
XVECTOR = [SAMPLES_PER_PATCH // 2] + [SAMPLES_PER_PATCH] * (MAX_PATCHES - 1) + [SAMPLES_PER_PATCH // 2]
CONTINUATION = [SAMPLES_PER_PATCH // 2] + [SAMPLES_PER_PATCH] * (MAX_PATCHES - 8) + [SAMPLES_PER_PATCH // 2]
"""Pieces of one generation: a patch each, the vocoder's half-patch lookahead first and flushed last."""


def dots_engine(model: str | Path, **overrides: object) -> DotsEngine:
    options: dict[str, object] = {
        "model": str(model),
        "runtime": "cpu",
        "max_voices": 2,
        "max_ref_seconds": REF_SECONDS,
        "max_patches": MAX_PATCHES,
        "double_streaming": False,
        "optimize": False,
        "caps": EngineCaps(0, 200, 0, interleavable=False),
    }
    return DotsEngine(**{**options, **overrides})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def engine(tiny_dots: Path) -> Iterator[DotsEngine]:
    dots = dots_engine(tiny_dots)
    dots.load()
    dots.warmup()
    yield dots
    dots.unload()


def register(registry: VoiceRegistry, **fields: object) -> VoiceEntry:
    defaults: dict[str, object] = {"audio": wav_clip(1.0, 180), "engine": "dots", "ref_text": "a short reference"}
    return registry.register(Registration(**{**defaults, **fields}))[0]  # type: ignore[arg-type]


def options(language: str = "en", **params: object) -> SynthesisOptions:
    return SynthesisOptions(resolve_language(language), {**DOTS.param_defaults(), **params})  # type: ignore[dict-item]


def lengths(engine: DotsEngine, voice: VoiceEntry) -> list[int]:
    return [len(piece) for piece in engine.stream("Hello world.", engine.prepare_voice(voice), options())]


def test_every_weight_loads_through_the_package(tiny_dots: Path) -> None:
    """Checked before the first generation, which fuses the DiT's attention projections in place."""
    engine = dots_engine(tiny_dots)
    engine.load()
    model = engine._runtime.model
    for module, stored in (
        (model.core, "model.safetensors"),
        (model.vocoder, "vocoder.safetensors"),
        (model.xvector_extractor, "speaker_encoder.safetensors"),
    ):
        loaded = module.state_dict()
        for name, tensor in load_file(str(tiny_dots / stored)).items():
            assert torch.equal(loaded[name], tensor), f"{stored}: {name}"
    described = engine.describe()
    assert engine.sample_rate == 24_000 and described["device"] == "cpu" and described["dtype"] == "float32"
    assert str(described["checkpoint"]).startswith(f"dots:{tiny_dots}@")
    assert described["model"] == str(tiny_dots) and described["fixed_sampling"] is None
    memory = described["memory"]
    assert memory == {
        "weights_bytes": engine.footprint,
        "footprint_bytes": engine.footprint,
        "footprint_measured": "weights only (CPU)",
    }
    assert engine.footprint > 1_000_000
    engine.unload()


def test_the_packages_torchaudio_operations_are_the_ports(engine: DotsEngine) -> None:
    """torchaudio cannot be installed beside this torch: the package's resampling and filterbanks run the ports."""
    from dots_tts.modules.speaker import encoder
    from dots_tts.utils import audio

    assert audio.AF.resample is torchaudio_ops.resample and audio.Kaldi.fbank is torchaudio_ops.fbank
    resample = engine._runtime.model.xvector_extractor.resample
    assert isinstance(resample, torchaudio_ops.Resample) and encoder.torchaudio.transforms.Resample is type(resample)
    with pytest.raises(RuntimeError, match="ported in its place"):
        audio.AF.lfilter  # noqa: B018 (anything else of torchaudio says why it is missing)


def test_the_ported_resampling_keeps_a_tone_and_the_filterbank_its_shape() -> None:
    rate = 16_000
    tone = torch.sin(2 * torch.pi * 440 * torch.arange(rate) / rate)[None]
    assert torchaudio_ops.resample(tone, rate, rate) is tone
    up = torchaudio_ops.resample(tone, rate, 48_000, 64, 0.95, "sinc_interp_kaiser")
    assert up.shape == (1, 48_000)
    spectrum = torch.fft.rfft(up[0, 4800:-4800]).abs()
    assert abs(int(spectrum.argmax()) / (len(up[0]) - 9600) * 48_000 - 440) < 5
    down = torchaudio_ops.Resample(48_000, rate)
    assert torch.allclose(down(up)[:, 200:-200], tone[:, 200:-200], atol=2e-3)
    features = torchaudio_ops.fbank(tone, num_mel_bins=80, sample_frequency=rate)
    assert features.shape == (98, 80) and torch.isfinite(features).all()  # 25 ms windows every 10 ms


def test_both_clone_modes_stream_a_patch_at_a_time(engine: DotsEngine, registry: VoiceRegistry) -> None:
    continuation = register(registry, audio=wav_clip(2.0, 200))
    xvector = register(registry, audio=wav_clip(2.0, 210), ref_text="", x_vector_only_mode=True)
    assert continuation.voice_id == compute_voice_id(wav_clip(2.0, 200), "dots")
    assert xvector.voice_id == compute_voice_id(wav_clip(2.0, 210), "dots", x_vector_only_mode=True)
    for voice, expected, text in ((continuation, CONTINUATION, "a short reference"), (xvector, XVECTOR, None)):
        prepared = engine.prepare_voice(voice)
        assert prepared.prompt_text == text
        assert prepared.reference == voice.folder / "prompts" / engine.model_key / "reference.wav"
        assert sf.info(str(prepared.reference)).duration == pytest.approx(REF_SECONDS)
        pieces = list(engine.stream("Hello world. This is a test.", prepared, options()))
        assert [len(p) for p in pieces] == expected
        assert all(p.dtype == np.float32 and np.isfinite(p).all() and np.abs(p).max() > 0.01 for p in pieces)


def test_pieces_arrive_while_the_generation_runs_and_closing_stops_it(
    engine: DotsEngine, registry: VoiceRegistry
) -> None:
    prepared = engine.prepare_voice(register(registry, audio=wav_clip(1.0, 220), x_vector_only_mode=True))
    patches: list[object] = []  # one per patch decoded: its latents enter the flow's history
    counter = engine._runtime.model.core.latent_proj.register_forward_hook(lambda *_: patches.append(None))
    try:
        stream = engine.stream("Streaming as it speaks.", prepared, options())
        assert len(next(stream)) == SAMPLES_PER_PATCH // 2
        assert len(patches) == 1  # the first patch, with eleven still to decode
        next(stream)
        stream.close()
        assert len(patches) == 2  # stopped where it was
    finally:
        counter.remove()
    assert [len(p) for p in engine.stream("Again, whole.", prepared, options())] == XVECTOR


def test_sampling_parameters_and_languages(engine: DotsEngine, registry: VoiceRegistry) -> None:
    assert set(DOTS.params.model_fields) == {"num_steps", "guidance_scale", "speaker_scale"}
    assert DOTS.param_defaults() == {"num_steps": 10, "guidance_scale": 1.2, "speaker_scale": 1.5}
    voice = register(registry, audio=wav_clip(1.0, 230))
    prepared = engine.prepare_voice(voice)

    def audio(language: str = "en", **params: object) -> np.ndarray:
        torch.manual_seed(3)
        return np.concatenate(list(engine.stream("你好，世界。", prepared, options(language, **params))))

    first = audio()
    assert np.array_equal(first, audio())  # the same seed, the same audio
    for changed in ({"num_steps": 2}, {"guidance_scale": 3.0}, {"speaker_scale": 0.5}, {"language": "zh"}):
        other = audio(**changed)
        assert len(other) == len(first) and not np.array_equal(other, first), changed
    for code in ("en", "en-gb", "es", "fr", "hi", "it", "pt", "ja", "zh"):
        engine.check_language(resolve_language(code))
    engine.check_params(DOTS.param_defaults())


def test_a_fixed_step_checkpoint_refuses_other_sampling(
    tiny_dots: Path, tmp_path: Path, registry: VoiceRegistry
) -> None:
    """The fixed-step checkpoints (dots.tts-mf-2steps and the like) declare their sampling in config.json."""
    folder = tmp_path / "fixed"
    shutil.copytree(tiny_dots, folder)
    config = json.loads((folder / "config.json").read_text())
    config["sampling"] = {"solver": "flow_matching", "num_steps": 1, "guidance_scale": 0.0}
    (folder / "config.json").write_text(json.dumps(config))
    fixed = dots_engine(folder)
    fixed.load()
    try:
        assert fixed.describe()["fixed_sampling"] == {"num_steps": 1, "guidance_scale": 0.0}
        for allowed in ({}, {"num_steps": 1}, {"guidance_scale": 0.0}, {"num_steps": 10, "speaker_scale": 2.0}):
            fixed.check_params({**DOTS.param_defaults(), **allowed})
        with pytest.raises(InvalidInput) as err:
            fixed.check_params({**DOTS.param_defaults(), "num_steps": 4, "guidance_scale": 2.0})
        assert err.value.code == "unsupported_parameter"
        assert "num_steps, guidance_scale" in err.value.message and "num_steps=1" in err.value.message
        voice = register(registry, audio=wav_clip(1.0, 240), x_vector_only_mode=True)
        assert lengths(fixed, voice) == XVECTOR
    finally:
        fixed.unload()


@pytest.mark.parametrize("x_vector_only_mode", [False, True])
def test_the_double_streaming_session_speaks_both_clone_modes(
    tiny_dots: Path, registry: VoiceRegistry, caplog: pytest.LogCaptureFixture, x_vector_only_mode: bool
) -> None:
    streaming = dots_engine(tiny_dots, double_streaming=True)
    streaming.load()
    try:
        voice = register(registry, audio=wav_clip(1.0, 250), x_vector_only_mode=x_vector_only_mode)
        prepared = streaming.prepare_voice(voice)
        patches: list[object] = []
        counter = streaming._runtime.model.core.latent_proj.register_forward_hook(lambda *_: patches.append(None))
        try:
            pieces = streaming.stream("Hi.", prepared, options())
            assert len(next(pieces)) == SAMPLES_PER_PATCH // 2
            decoded = len(patches)
            with caplog.at_level(logging.WARNING, logger="polytts.engines.dots"):
                rest = [len(p) for p in pieces]
        finally:
            counter.remove()
        assert decoded < len(patches)  # the first piece came before the session had decoded the rest
        assert rest and set(rest) == {SAMPLES_PER_PATCH}
        # The random model never reaches its end of speech: the session stops at the generation's bound.
        assert "POLYTTS_DOTS_MAX_PATCHES" in caplog.text
    finally:
        streaming.unload()


def test_prepared_voices_are_bounded_and_their_clips_reused(engine: DotsEngine, registry: VoiceRegistry) -> None:
    voices = [register(registry, audio=wav_clip(1.0, 300 + 10 * i)) for i in range(3)]
    for voice in voices:
        engine.prepare_voice(voice)
    assert engine.describe()["prepared_voices"] == 2  # max_voices
    clip = voices[0].folder / "prompts" / engine.model_key / "reference.wav"
    written = clip.stat().st_mtime_ns
    assert engine.prepare_voice(voices[0]).reference == clip and clip.stat().st_mtime_ns == written


def test_a_seeded_voice_folder_from_elsewhere_is_cloned_from_its_clip(
    engine: DotsEngine, registry: VoiceRegistry, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as err:
        register(registry, seed_audio=wav_clip(1.0, 560), seed_text="calm")
    assert err.value.code == "seed_not_supported"
    lenient = VoiceRegistry(tmp_path / "lenient", families={"dots": dataclasses.replace(DOTS, takes_seed=True)})
    seeded = register(lenient, seed_audio=wav_clip(1.0, 560), seed_text="calm")
    assert seeded.seed_path is not None
    assert engine.prepare_voice(seeded).prompt_text == "a short reference"


def test_only_registered_clips_are_voices(engine: DotsEngine) -> None:
    with pytest.raises(InvalidInput) as err:
        engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))
    assert err.value.code == "wrong_engine" and "dots.tts clones from a registered clip" in err.value.message


def test_unload_releases_and_reload_gives_the_same_checkpoint(tiny_dots: Path, registry: VoiceRegistry) -> None:
    threads = torch.get_num_threads()
    dots = dots_engine(tiny_dots)
    dots.load()
    assert torch.get_num_threads() == threads  # the package's one-thread setting does not outlive the load
    checkpoint = dots.checkpoint
    voice = register(registry, audio=wav_clip(1.0, 500), x_vector_only_mode=True)
    dots.prepare_voice(voice)
    dots.unload()
    assert not dots.loaded and dots.describe()["prepared_voices"] == 0
    memory = dots.describe()["memory"]
    assert memory["weights_bytes"] == memory["footprint_bytes"] == 0  # type: ignore[index]
    dots.load()
    assert dots.checkpoint == checkpoint
    assert lengths(dots, voice) == XVECTOR
    dots.unload()


def test_offline_hub_id_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(EngineLoadError, match="POLYTTS_DOTS_MODEL"):
        dots_engine("dots-studio/dots.tts-soar").load()
    assert time.monotonic() - started < 10


def test_folders_that_are_no_dots_checkpoint_are_refused(tiny_dots: Path, tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    shutil.copytree(tiny_dots, partial)
    (partial / "vocoder.safetensors").unlink()
    with pytest.raises(EngineLoadError, match="lacks vocoder.safetensors"):
        dots_engine(partial).load()
    other = tmp_path / "other"
    shutil.copytree(tiny_dots, other)
    (other / "config.json").write_text(json.dumps({"model_type": "qwen3_tts"}))
    with pytest.raises(EngineLoadError, match="not a dots.tts TTS checkpoint"):
        dots_engine(other).load()


def test_a_reference_cap_that_leaves_no_room_to_speak_is_refused(tiny_dots: Path) -> None:
    with pytest.raises(EngineLoadError, match="POLYTTS_DOTS_MAX_REF_SECONDS 1 is 13 patches"):
        dots_engine(tiny_dots, max_ref_seconds=1.0).load()


def test_the_family_is_built_only_where_it_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLYTTS_DOTS_MODEL", "POLYTTS_RUNTIME"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    built = DOTS.build(DOTS.own_settings(settings), settings.engine_context())
    assert isinstance(built, DotsEngine) and built.model_ref == "dots-studio/dots.tts-soar"
    assert built.caps == EngineCaps(0, 200, 0, interleavable=False) and built.max_patches == 500
    for unserved in ({"dots_model": ""}, {"runtime": "mlx"}):
        settings = load_settings(**unserved)
        assert DOTS.build(DOTS.own_settings(settings), settings.engine_context()) is None, unserved
