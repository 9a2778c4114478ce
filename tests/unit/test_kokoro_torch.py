"""The Kokoro engine on its PyTorch backend: hexgrad's KModel on a small random model built at test time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engines import ENGINE_SPECS
from engines.base import BlendVoice, BuiltinVoice, EngineCaps, EngineLoadError, SynthesisOptions
from engines.kokoro.engine import KokoroEngine
from errors import NotFound
from gpu.engine_pool import EnginePool, build_engines
from gpu.gpu_thread import GpuThread
from settings import load_settings
from tests.support.tiny_kokoro import TINY_KOKORO_VOICES
from text.chunking import chunk_text
from text.languages import resolve_language

CAPS = EngineCaps(first_chunk_chars=40, max_chunk_chars=120)
ENGLISH = SynthesisOptions(language=resolve_language("en"))


def torch_engine(model: str) -> KokoroEngine:
    return KokoroEngine(backend="torch", runtime="cpu", onnx_dir=Path("unused"), torch_model=model, caps=CAPS)


@pytest.fixture(scope="module")
def engine(tiny_kokoro: Path) -> Iterator[KokoroEngine]:
    kokoro = torch_engine(str(tiny_kokoro))
    kokoro.load()
    yield kokoro
    kokoro.unload()


def test_loads_through_kmodel_and_lists_its_packs(engine: KokoroEngine, tiny_kokoro: Path) -> None:
    described = engine.describe()
    assert described["backend"] == "torch" and described["device"] == "cpu" and described["loaded"] is True
    assert str(described["checkpoint"]).startswith(f"kokoro-torch:{tiny_kokoro}@")
    assert described["memory"]["weights_bytes"] > 100_000_000  # type: ignore[index]
    # The stock voices (no hub needed), then the packs that come with these weights.
    names = [v.name for v in engine.builtin_voices()]
    assert names[-3:] == list(TINY_KOKORO_VOICES) and len(names) == 54 + 3 and "af_heart" in names
    assert {v.language for v in engine.builtin_voices() if v.name in TINY_KOKORO_VOICES} == {"en-us", "en-gb"}


@pytest.mark.slow
def test_chunked_streaming_yields_audio_per_chunk(engine: KokoroEngine) -> None:
    handle = engine.prepare_voice(BuiltinVoice("af_tiny", "en-us", "kokoro"))
    assert handle.shape == (510, 1, 256)
    text = "The first chunk is short. Then a longer one follows, with several words in it. And a third."
    pieces = [piece for chunk in chunk_text(text, 40, 120) for piece in engine.stream(chunk.text, handle, ENGLISH)]
    assert len(pieces) >= 2
    assert all(p.dtype == np.float32 and p.ndim == 1 and len(p) > 1000 for p in pieces)
    assert all(np.isfinite(p).all() for p in pieces)


@pytest.mark.slow
def test_inference_returns_kmodels_predicted_durations(engine: KokoroEngine) -> None:
    backend = engine.backend
    assert backend is not None
    tokens = [backend.vocab[p] for p in "hˈɛloʊ wˈɜːld."]
    style = engine.prepare_voice(BuiltinVoice("af_tiny", "en-us", "kokoro"))[len(tokens) - 1]
    audio, durations = backend.infer_timed(tokens, style, 1.0)
    assert durations is not None and durations.dtype == np.int64 and durations.shape == (len(tokens) + 2,)
    assert durations.min() >= 1 and durations.sum() * 600 == len(audio)
    voice = engine.prepare_voice(BuiltinVoice("af_tiny", "en-us", "kokoro"))
    pieces = list(engine.stream_timed("Hello there, world.", voice, ENGLISH, offset=1.0))
    words = [word for _, timed in pieces for word in timed]
    assert [w.word for w in words] == ["Hello", "there,", "world."]
    assert all(1.0 <= w.start <= w.end <= 1.0 + len(pieces[0][0]) / 24_000 for w in words)


def test_prepared_voices_and_blends_are_resolved_once(engine: KokoroEngine) -> None:
    a, b = (BuiltinVoice(n, "en-us", "kokoro") for n in ("af_tiny", "am_tiny"))
    blend = BlendVoice("af_tiny(0.75)+am_tiny(0.25)", "kokoro", ((a, 0.75), (b, 0.25)))
    mixed = engine.prepare_voice(blend)
    expected = 0.75 * engine.prepare_voice(a) + 0.25 * engine.prepare_voice(b)
    assert np.allclose(mixed, expected, atol=1e-6)
    assert engine.prepare_voice(blend) is mixed
    assert len(np.concatenate(list(engine.stream("Blended.", mixed, ENGLISH)))) > 1000


def test_unknown_pack(engine: KokoroEngine) -> None:
    with pytest.raises(NotFound) as err:
        engine.prepare_voice(BuiltinVoice("zz_nobody", "en-us", "kokoro"))
    assert err.value.code == "voice_not_found"


@pytest.mark.slow
def test_unload_drops_the_model_and_reload_works(tiny_kokoro: Path) -> None:
    kokoro = torch_engine(str(tiny_kokoro))
    kokoro.load()
    handle = kokoro.prepare_voice(BuiltinVoice("bf_tiny", "en-gb", "kokoro"))
    kokoro.unload()
    assert not kokoro.loaded and kokoro.describe()["memory"] == {"weights_bytes": 0}
    kokoro.load()
    audio = np.concatenate(list(kokoro.stream("Again.", handle, SynthesisOptions(language=resolve_language("en-gb")))))
    assert len(audio) > 1000


def test_offline_hub_id_fails_fast_with_a_clear_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))  # an empty hub cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(EngineLoadError) as err:
        torch_engine("hexgrad/Kokoro-82M").load()
    assert time.monotonic() - started < 10
    assert err.value.status == 503 and err.value.code == "engine_failed"
    assert "POLYTTS_KOKORO_MODEL" in err.value.message and "offline" in err.value.message


def test_a_folder_without_weights_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(EngineLoadError, match="config.json and exactly one .pth"):
        torch_engine(str(tmp_path / "empty")).load()


@pytest.mark.slow
async def test_the_manager_reports_the_footprint_measured_after_load(tiny_kokoro: Path, tmp_path: Path) -> None:
    settings = load_settings(kokoro_backend="torch", kokoro_model=str(tiny_kokoro), runtime="cpu", cache_dir=tmp_path)
    gpu = GpuThread()
    pool = EnginePool(settings, build_engines(settings, ENGINE_SPECS), gpu)
    assert pool.manager.status()["units"]["kokoro"]["footprint"] == 0  # nothing is loaded yet
    gpu.start()
    try:
        await gpu.run(pool.manager.ensure, "kokoro")
        assert pool.manager.status()["units"]["kokoro"]["footprint"] > 100_000_000
    finally:
        await gpu.run(pool.manager.unload_now, None)
        gpu.stop()


@pytest.mark.parametrize("name", ["af_heart", "bm_george", "ef_dora", "if_sara"])
def test_stock_voices_on_the_torch_backend(engine: KokoroEngine, name: str) -> None:
    voice = next(v for v in engine.builtin_voices() if v.name == name)
    handle = engine.prepare_voice(voice)
    assert handle.shape == (510, 1, 256)
    pieces = list(engine.stream("Hola.", handle, SynthesisOptions(resolve_language(voice.language))))
    assert pieces and all(np.isfinite(piece).all() for piece in pieces)
