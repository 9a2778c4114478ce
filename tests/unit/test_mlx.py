"""The MLX engines (mlx-audio on mlx's Linux CPU backend) on tiny random models, driven on one GPU thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from engines import FAMILIES
from engines.base import BlendVoice, BuiltinVoice, EngineCaps, SynthesisOptions
from engines.kokoro.engine import KokoroEngine
from engines.mlx_base import WrongThread
from engines.qwen.mlx_backend import MlxQwenEngine
from engines.voxcpm.mlx_backend import MlxVoxCPMEngine
from errors import InvalidInput
from gpu.gpu_thread import GpuThread
from tests.support.clips import wav_clip
from text.languages import resolve_language
from voicebank.registration import Registration
from voicebank.registry import VoiceRegistry
from voicebank.voice_entry import VoiceEntry

T = TypeVar("T")
CAPS = EngineCaps(0, 300, 0, interleavable=False)
PIECE = 7680


@pytest.fixture(scope="module")
def gpu() -> Iterator[GpuThread]:
    thread = GpuThread()
    thread.start()
    yield thread
    thread.stop()


def on(gpu: GpuThread, fn: Callable[..., T], *args: object) -> T:
    return gpu.submit(fn, *args).result(timeout=300)


def collect(gpu: GpuThread, engine: object, text: str, voice: object, options: SynthesisOptions) -> list[np.ndarray]:
    return on(gpu, lambda: list(engine.stream(text, voice, options)))  # type: ignore[attr-defined]


def register(registry: VoiceRegistry, engine: str, **fields: object) -> VoiceEntry:
    defaults: dict[str, object] = {"audio": wav_clip(1.0, 240), "engine": engine, "ref_text": "hello there"}
    return registry.register(Registration(**{**defaults, **fields}))[0]  # type: ignore[arg-type]


ENGLISH = SynthesisOptions(resolve_language("en"), FAMILIES["qwen"].param_defaults())


@pytest.fixture(scope="module")
def qwen(gpu: GpuThread, tiny_mlx_models: dict[str, Path]) -> Iterator[MlxQwenEngine]:
    engine = MlxQwenEngine(
        model=str(tiny_mlx_models["qwen"]),
        cache_mb=64,
        max_voices=2,
        max_ref_seconds=2.0,
        max_tokens=8,
        stream_interval=0.32,
        caps=CAPS,
    )
    on(gpu, engine.load)
    yield engine
    on(gpu, engine.unload)


def test_qwen_clones_and_streams_inside_a_generation(
    gpu: GpuThread, qwen: MlxQwenEngine, registry: VoiceRegistry
) -> None:
    voice = register(registry, "qwen")
    prepared = on(gpu, qwen.prepare_voice, voice)
    folder = voice.folder / "prompts" / qwen.model_key
    assert sorted(p.name for p in folder.iterdir()) == ["ref_codes.npy", "reference.npy"]
    pieces = collect(gpu, qwen, "Hello world.", prepared, ENGLISH)
    assert len(pieces) == 2 and all(len(p) == PIECE for p in pieces)  # 8 frames in pieces of 0.32 s (4 frames)
    assert qwen.sample_rate == 24_000 and all(np.isfinite(p).all() for p in pieces)
    xvec = on(
        gpu,
        qwen.prepare_voice,
        register(registry, "qwen", audio=wav_clip(1.0, 260), ref_text="", x_vector_only_mode=True),
    )
    assert xvec.ref_text is None and len(collect(gpu, qwen, "Hi.", xvec, ENGLISH)) == 2


def test_prepared_voices_persist_and_are_bounded_in_memory(
    gpu: GpuThread, qwen: MlxQwenEngine, registry: VoiceRegistry
) -> None:
    voices = [register(registry, "qwen", audio=wav_clip(1.0, 300 + 10 * i)) for i in range(3)]
    for voice in voices:
        on(gpu, qwen.prepare_voice, voice)
    assert qwen.describe()["prepared_voices"] == 2  # POLYTTS_MAX_VOICES_MEM
    codes = voices[0].folder / "prompts" / qwen.model_key / "ref_codes.npy"
    written = codes.stat().st_mtime_ns
    on(gpu, qwen.unload)
    on(gpu, qwen.load)  # a restart or a model switch: the artefacts come back from disk
    prepared = on(gpu, qwen.prepare_voice, voices[0])
    assert codes.stat().st_mtime_ns == written
    assert prepared.cache_key in qwen.model._icl_cache
    assert len(collect(gpu, qwen, "From disk.", prepared, ENGLISH)) == 2


def test_mlx_calls_off_the_loading_thread_are_refused(
    gpu: GpuThread, qwen: MlxQwenEngine, registry: VoiceRegistry
) -> None:
    prepared = on(gpu, qwen.prepare_voice, register(registry, "qwen", audio=wav_clip(1.0, 900)))
    with pytest.raises(WrongThread):
        list(qwen.stream("Wrong thread.", prepared, ENGLISH))
    assert "MainThread" in qwen.owner.threads_seen  # the refused attempt, recorded
    assert threading.current_thread().name != "polytts-gpu"


def test_only_registered_clips_are_voices_each_in_its_familys_words(
    gpu: GpuThread, qwen: MlxQwenEngine, tiny_mlx_models: dict[str, Path]
) -> None:
    voxcpm = MlxVoxCPMEngine(
        model=str(tiny_mlx_models["voxcpm"]), cache_mb=64, max_voices=4, max_ref_seconds=2.0, max_len=8, caps=CAPS
    )
    for engine, words in ((qwen, "Qwen3-TTS clones"), (voxcpm, "VoxCPM clones")):
        with pytest.raises(InvalidInput) as err:
            on(gpu, engine.prepare_voice, BuiltinVoice("af_tiny", "en-us", "kokoro"))
        assert err.value.code == "wrong_engine" and words in err.value.message


def test_memory_is_reported_and_cleared(gpu: GpuThread, qwen: MlxQwenEngine) -> None:
    on(gpu, qwen.release)
    memory = qwen.describe()["memory"]
    assert isinstance(memory, dict) and set(memory) == {"active", "peak", "cache"}
    assert memory["cache"] == 0 and memory["peak"] > 0


@pytest.mark.slow
def test_voxcpm_on_mlx_streams_per_generation(
    gpu: GpuThread, tiny_mlx_models: dict[str, Path], registry: VoiceRegistry
) -> None:
    engine = MlxVoxCPMEngine(
        model=str(tiny_mlx_models["voxcpm"]), cache_mb=64, max_voices=4, max_ref_seconds=2.0, max_len=8, caps=CAPS
    )
    on(gpu, engine.load)
    try:
        assert engine.sample_rate == 48_000
        options = SynthesisOptions(resolve_language("en"), FAMILIES[engine.name].param_defaults())
        for fields in (
            {},
            {"ref_text": "", "x_vector_only_mode": True},
            {"seed_audio": wav_clip(1.0, 555), "seed_text": "calm"},
        ):
            voice = register(registry, "voxcpm", audio=wav_clip(1.5, 200 + len(fields)), **fields)
            prepared = on(gpu, engine.prepare_voice, voice)
            assert prepared.reference.dtype == np.float32 and len(prepared.reference) == 72_000  # 1.5 s at 48 kHz
            pieces = collect(gpu, engine, "Hello there.", prepared, options)
            assert len(pieces) == 1 and len(pieces[0]) == 8 * PIECE + 8
    finally:
        on(gpu, engine.unload)


@pytest.mark.slow
def test_kokoro_on_mlx_keeps_packs_and_blends(gpu: GpuThread, tiny_mlx_models: dict[str, Path]) -> None:
    engine = KokoroEngine(
        backend="auto",
        runtime="mlx",
        onnx_dir=Path("unused"),
        torch_model="",
        mlx_model=str(tiny_mlx_models["kokoro"]),
        mlx_cache_mb=64,
        caps=EngineCaps(60, 220),
    )
    assert engine.describe()["backend"] == "mlx"
    on(gpu, engine.load)
    try:
        # The stock voices on the MLX backend too, then the packs that come with these weights.
        names = [v.name for v in engine.builtin_voices()]
        assert names[-3:] == ["af_tiny", "am_tiny", "bf_tiny"] and len(names) == 54 + 3 and "af_heart" in names
        a, b = (BuiltinVoice(n, "en-us", "kokoro") for n in ("af_tiny", "bf_tiny"))
        blend = on(gpu, engine.prepare_voice, BlendVoice("af_tiny(0.5)+bf_tiny(0.5)", "kokoro", ((a, 0.5), (b, 0.5))))
        spanish = SynthesisOptions(resolve_language("es"), {"speed": 2.0})
        audio = np.concatenate(collect(gpu, engine, "Hola.", blend, spanish))
        assert len(audio) > 1000 and np.isfinite(audio).all()
        assert str(engine.checkpoint).startswith("kokoro-mlx:")
        tokens = [engine.backend.vocab[p] for p in "ˈola."]  # type: ignore[union-attr]
        timed, durations = on(gpu, engine.backend.infer_timed, tokens, blend[len(tokens) - 1], 1.0)  # type: ignore[union-attr]
        assert durations.dtype == np.int64 and durations.shape == (len(tokens) + 2,) and durations.min() >= 1
        assert durations.sum() * 600 == len(timed)  # mlx-audio's pred_dur: 600 samples per frame, as on the others
    finally:
        on(gpu, engine.unload)
