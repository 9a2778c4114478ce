"""Qwen3-TTS on PyTorch on a tiny random checkpoint built at test time, loaded by the package's own from_pretrained."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engines.base import BuiltinVoice, EngineCaps, EngineLoadError, SynthesisOptions
from engines.qwen.engine import SPEC as QWEN
from engines.qwen.engine import QwenEngine
from engines.qwen.mlx_backend import MlxQwenEngine
from engines.qwen.upstream import CODEC_ENCODER_RENAMES
from errors import InvalidInput
from gpu.gpu_thread import GpuThread
from settings import SettingsError, load_settings
from tests.support.clips import wav_clip
from tests.unit.test_mlx import on, register
from text.languages import resolve_language
from voicebank.ids import compute_voice_id
from voicebank.registry import VoiceRegistry

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models run fastest on one thread

FRAME = 1920  # samples per 12.5 Hz frame at 24 kHz
MAX_TOKENS = 12  # generation steps: 11 frames (the first step only prefills; the random model never stops)
PIECE_FRAMES = 3  # stream_interval 0.25 s
PIECES = [3, 3, 3, 2]


def qwen_engine(model: str | Path, **overrides: object) -> QwenEngine:
    options: dict[str, object] = {
        "model": str(model),
        "runtime": "cpu",
        "max_voices": 2,
        "max_ref_seconds": 2.0,
        "max_tokens": MAX_TOKENS,
        "stream_interval": 0.25,
        "caps": EngineCaps(0, 300, 0, interleavable=False),
    }
    return QwenEngine(**{**options, **overrides})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def engine(tiny_qwen_torch: Path) -> Iterator[QwenEngine]:
    qwen = qwen_engine(tiny_qwen_torch)
    qwen.load()
    yield qwen
    qwen.unload()


def options(engine: QwenEngine, language: str = "en", **params: object) -> SynthesisOptions:
    return SynthesisOptions(resolve_language(language), {**QWEN.param_defaults(), **params})  # type: ignore[dict-item]


def test_every_weight_loads_through_the_package(engine: QwenEngine, tiny_qwen_torch: Path) -> None:
    """The package's from_pretrained, fitted to this Transformers (engines/qwen_import.py), loses no weight: the
    codec's encoder weights, stored in Mimi's original layout, arrive under the split layout's names."""
    model = engine._model.model
    loaded = model.state_dict()
    for name, tensor in load_file(str(tiny_qwen_torch / "model.safetensors")).items():
        assert torch.equal(loaded[name], tensor), name
    codec = model.speech_tokenizer.model.state_dict()
    stored = load_file(str(tiny_qwen_torch / "speech_tokenizer" / "model.safetensors"))
    assert any(name.startswith(CODEC_ENCODER_RENAMES[0][0]) for name in stored)
    for name, tensor in stored.items():
        for old, new in CODEC_ENCODER_RENAMES:
            name = new + name[len(old) :] if name.startswith(old) else name
        assert torch.equal(codec[name], tensor), name
    described = engine.describe()
    assert engine.sample_rate == 24_000 and described["device"] == "cpu" and described["dtype"] == "float32"
    assert str(described["checkpoint"]).startswith(f"qwen:{tiny_qwen_torch}@")
    assert described["memory"] == {"weights_bytes": engine.footprint} and engine.footprint > 1_000_000


@pytest.mark.slow
def test_in_context_and_xvector_voices_stream_every_quarter_second(engine: QwenEngine, registry: VoiceRegistry) -> None:
    icl = register(registry, "qwen", audio=wav_clip(2.0, 180), ref_text="a short reference")
    xvec = register(registry, "qwen", audio=wav_clip(2.0, 190), ref_text="", x_vector_only_mode=True)
    for voice, files in ((icl, ["ref_codes.npy", "speaker.npy"]), (xvec, ["speaker.npy"])):
        prepared = engine.prepare_voice(voice)
        assert sorted(p.name for p in (voice.folder / "prompts" / engine.model_key).iterdir()) == files
        assert prepared.prompt.icl_mode is (voice is icl)
        pieces = list(engine.stream("Hello world. This is a test.", prepared, options(engine)))
        assert [len(p) for p in pieces] == [n * FRAME for n in PIECES]
        assert all(p.dtype == np.float32 and np.isfinite(p).all() for p in pieces)
    assert np.load(icl.folder / "prompts" / engine.model_key / "ref_codes.npy").shape == (25, 16)  # 2 s at 12.5 Hz


def test_pieces_arrive_while_the_generation_runs_and_closing_stops_it(
    engine: QwenEngine, registry: VoiceRegistry
) -> None:
    prepared = engine.prepare_voice(register(registry, "qwen", audio=wav_clip(1.0, 200)))
    steps: list[object] = []  # one per talker forward pass: the prefill, then one per frame
    counter = engine._model.model.talker.register_forward_hook(lambda *_: steps.append(None))
    try:
        stream = engine.stream("Streaming as it speaks.", prepared, options(engine))
        assert len(next(stream)) == PIECE_FRAMES * FRAME
        assert len(steps) == 1 + PIECE_FRAMES  # the first piece, with the rest of the generation still to run
        stream.close()
        assert len(steps) == 1 + PIECE_FRAMES  # stopped where it was
    finally:
        counter.remove()
    assert not [t for t in threading.enumerate() if t.name == "polytts-qwen-generate"]


@pytest.mark.slow
def test_streamed_audio_is_the_packages_own_generation(engine: QwenEngine, registry: VoiceRegistry) -> None:
    """Same seed, same codes as the package's public generate_voice_clone; the first piece decodes (with the
    reference as left context) to what the package's whole-utterance decode gives for it."""
    prepared = engine.prepare_voice(register(registry, "qwen", audio=wav_clip(2.0, 210), ref_text="the reference"))
    torch.manual_seed(7)
    pieces = list(engine.stream("Hello there.", prepared, options(engine)))
    torch.manual_seed(7)
    [whole], rate = engine._model.generate_voice_clone(
        text="Hello there.", language="english", voice_clone_prompt=[prepared.prompt], max_new_tokens=MAX_TOKENS
    )
    assert rate == 24_000 and len(whole) == sum(len(p) for p in pieces)
    scale = float(np.abs(whole).max())
    assert scale > 0
    np.testing.assert_allclose(pieces[0], whole[: len(pieces[0])], rtol=1e-4, atol=1e-4 * scale)


def test_sampling_parameters_and_languages(engine: QwenEngine, registry: VoiceRegistry) -> None:
    assert set(QWEN.params.model_fields) == {
        "temperature",
        "top_k",
        "top_p",
        "repetition_penalty",
        "subtalker_temperature",
        "subtalker_top_k",
        "subtalker_top_p",
        "max_new_tokens",
        "non_streaming_mode",
    }
    prepared = engine.prepare_voice(register(registry, "qwen", audio=wav_clip(1.0, 220)))
    chosen = options(
        engine,
        "zh",
        temperature=0.5,
        top_k=5,
        top_p=0.8,
        repetition_penalty=1.2,
        subtalker_temperature=0.3,
        subtalker_top_k=3,
        subtalker_top_p=0.7,
        max_new_tokens=5,
        non_streaming_mode=True,
    )
    engine.check_params(chosen.params)
    assert [len(p) for p in engine.stream("你好，世界。", prepared, chosen)] == [3 * FRAME, 1 * FRAME]
    with pytest.raises(InvalidInput) as err:
        engine.check_params({**QWEN.param_defaults(), "max_new_tokens": MAX_TOKENS + 1})
    assert err.value.code == "max_new_tokens_too_large" and "POLYTTS_QWEN_MAX_TOKENS" in err.value.message
    with pytest.raises(InvalidInput) as err:
        engine.check_language(resolve_language("hi"))
    assert err.value.code == "unsupported_language" and "Hindi" in err.value.message
    for code in ("en", "en-gb", "es", "fr", "it", "pt", "zh"):
        engine.check_language(resolve_language(code))


@pytest.mark.slow
def test_prepared_voices_are_bounded_in_memory_and_reused_after_a_restart(
    engine: QwenEngine, registry: VoiceRegistry, tiny_qwen_torch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    voices = [register(registry, "qwen", audio=wav_clip(1.0, 300 + 10 * i)) for i in range(3)]
    first = [engine.prepare_voice(voice) for voice in voices]
    assert engine.describe()["prepared_voices"] == 2  # max_voices
    artefacts = sorted((voices[0].folder / "prompts" / engine.model_key).iterdir())
    written = [p.stat().st_mtime_ns for p in artefacts]

    restarted = qwen_engine(tiny_qwen_torch)
    restarted.load()
    try:
        assert restarted.model_key == engine.model_key

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("a prepared voice was computed again")

        monkeypatch.setattr(restarted._model, "create_voice_clone_prompt", refuse)
        again = restarted.prepare_voice(voices[0])
        assert [p.stat().st_mtime_ns for p in artefacts] == written
        assert torch.equal(again.prompt.ref_code, first[0].prompt.ref_code)
        assert torch.equal(again.prompt.ref_spk_embedding, first[0].prompt.ref_spk_embedding)
        assert len(list(restarted.stream("From disk.", again, options(restarted)))) == len(PIECES)
    finally:
        restarted.unload()


def test_a_seeded_voice_folder_from_elsewhere_is_cloned_from_its_clip(engine: QwenEngine, tmp_path: Path) -> None:
    """The registry refuses a tone seed for `qwen`; a voice folder written before that rule still serves."""
    lenient = VoiceRegistry(tmp_path / "voices", families={"qwen": dataclasses.replace(QWEN, takes_seed=True)})
    seeded = register(lenient, "qwen", seed_audio=wav_clip(1.0, 560), seed_text="calm")
    assert seeded.seed_path is not None
    prepared = engine.prepare_voice(seeded)
    assert prepared.prompt.icl_mode and prepared.prompt.ref_text == "hello there"


def test_only_registered_clips_are_voices(engine: QwenEngine) -> None:
    with pytest.raises(InvalidInput) as err:
        engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))
    assert err.value.code == "wrong_engine"
    assert "Qwen3-TTS clones from a registered clip" in err.value.message and "VoxCPM" not in err.value.message


@pytest.mark.parametrize(
    ("qwen", "voxcpm", "expected"),
    [
        ("4", "9", 4.0),  # Qwen's own variable, whatever VoxCPM's says
        (None, "9", 9.0),  # VoxCPM's, as Qwen read it before: for one more release, with a warning
        (None, None, 15.0),
    ],
)
def test_qwen_trims_its_references_by_its_own_variable(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    qwen: str | None,
    voxcpm: str | None,
    expected: float,
) -> None:
    for name, value in (("POLYTTS_QWEN_MAX_REF_SECONDS", qwen), ("POLYTTS_VOXCPM_MAX_REF_SECONDS", voxcpm)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    for runtime, kind in (("cpu", QwenEngine), ("mlx", MlxQwenEngine)):
        settings = load_settings(qwen_model="Qwen/Qwen3-TTS-12Hz-1.7B-Base", runtime=runtime)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="polytts.engines.qwen"):
            built = QWEN.build(QWEN.own_settings(settings), settings.engine_context())
        assert isinstance(built, kind) and built.max_ref_seconds == expected
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        if qwen is None and voxcpm is not None:
            assert len(warnings) == 1, warnings
            assert "POLYTTS_VOXCPM_MAX_REF_SECONDS" in warnings[0] and "POLYTTS_QWEN_MAX_REF_SECONDS" in warnings[0]
            assert "deprecated" in warnings[0]
        else:
            assert not warnings
        assert settings.voxcpm_max_ref_seconds == float(voxcpm or 15)  # VoxCPM reads its own as before


def test_a_bad_voxcpm_reference_length_is_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read by VoxCPM and, deprecated, by Qwen: one variable, one complaint."""
    monkeypatch.setenv("POLYTTS_VOXCPM_MAX_REF_SECONDS", "-1")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert str(err.value).count("POLYTTS_VOXCPM_MAX_REF_SECONDS") == 1 and "POLYTTS_POLYTTS" not in str(err.value)


@pytest.mark.slow
def test_unload_releases_and_reload_gives_the_same_checkpoint(tiny_qwen_torch: Path, registry: VoiceRegistry) -> None:
    qwen = qwen_engine(tiny_qwen_torch)
    qwen.load()
    checkpoint = qwen.checkpoint
    voice = register(registry, "qwen", audio=wav_clip(1.0, 500))
    qwen.prepare_voice(voice)
    qwen.unload()
    assert not qwen.loaded and qwen.describe()["prepared_voices"] == 0
    assert qwen.describe()["memory"] == {"weights_bytes": 0}
    qwen.load()
    assert qwen.checkpoint == checkpoint
    assert len(list(qwen.stream("After.", qwen.prepare_voice(voice), options(qwen)))) == len(PIECES)
    qwen.unload()


def test_offline_hub_id_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(EngineLoadError, match="POLYTTS_QWEN_MODEL"):
        qwen_engine("Qwen/Qwen3-TTS-12Hz-1.7B-Base").load()
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"tts_model_type": "custom_voice"}, "needs a Base one"),
        ({"tokenizer_type": "qwen3_tts_tokenizer_25hz"}, "12 Hz"),
        ({"model_type": "voxcpm2"}, "not a Qwen3-TTS checkpoint"),
    ],
)
def test_checkpoints_that_cannot_clone_are_refused(
    tiny_qwen_torch: Path, tmp_path: Path, change: dict[str, str], reason: str
) -> None:
    folder = tmp_path / "other"
    shutil.copytree(tiny_qwen_torch, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(EngineLoadError, match=reason):
        qwen_engine(folder).load()


@pytest.mark.slow
def test_one_voice_folder_serves_on_pytorch_and_on_mlx(
    engine: QwenEngine, registry: VoiceRegistry, tmp_path: Path
) -> None:
    """The same registration is the same voice id on every node; each runtime keeps its own prepared artefacts."""
    from tests.support.tiny_mlx_qwen3 import build_tiny_qwen3_tts

    clip = wav_clip(1.0, 640)
    voice = register(registry, "qwen", audio=clip)
    assert voice.voice_id == compute_voice_id(clip, "qwen")
    mlx = MlxQwenEngine(
        model=str(build_tiny_qwen3_tts(tmp_path / "mlx-qwen")),
        cache_mb=64,
        max_voices=2,
        max_ref_seconds=2.0,
        max_tokens=4,
        stream_interval=0.25,
        caps=EngineCaps(0, 300, 0, interleavable=False),
    )
    gpu = GpuThread()
    gpu.start()
    try:
        on(gpu, mlx.load)
        on(
            gpu,
            lambda: list(
                mlx.stream(
                    "Hi.", mlx.prepare_voice(voice), SynthesisOptions(resolve_language("en"), QWEN.param_defaults())
                )
            ),
        )
        on(gpu, mlx.unload)
    finally:
        gpu.stop()
    assert len(list(engine.stream("Hi.", engine.prepare_voice(voice), options(engine)))) == len(PIECES)
    assert mlx.model_key != engine.model_key
    assert {p.name for p in (voice.folder / "prompts").iterdir()} == {mlx.model_key, engine.model_key}
