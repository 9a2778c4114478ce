"""The VoxCPM2 engine on a tiny random VoxCPM2 built at test time, loaded by the package's own from_pretrained."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from engines.base import BuiltinVoice, EngineCaps, EngineLoadError, SynthesisOptions
from engines.voxcpm.engine import SPEC as VOXCPM
from engines.voxcpm.engine import VoxCPMEngine
from errors import InvalidInput
from tests.support.clips import wav_clip
from tests.support.servers import ROOT
from text.languages import resolve_language
from voicebank.registration import Registration
from voicebank.registry import VoiceRegistry
from voicebank.voice_entry import VoiceEntry

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models run fastest on one thread

MAX_LEN = 16  # audio patches per generation: the random model never stops by itself
PIECE = 7680  # samples per streamed piece: 160 ms at 48 kHz


def voxcpm_engine(model: str, **overrides: object) -> VoxCPMEngine:
    options: dict[str, object] = {
        "model": model,
        "runtime": "cpu",
        "denoiser": None,
        "max_ref_seconds": 2.0,
        "max_len": MAX_LEN,
        "caps": EngineCaps(0, 80, 3, interleavable=False),
    }
    return VoxCPMEngine(**{**options, **overrides})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def engine(tiny_voxcpm: Path) -> Iterator[VoxCPMEngine]:
    voxcpm = voxcpm_engine(str(tiny_voxcpm))
    voxcpm.load()
    yield voxcpm
    voxcpm.unload()


def register(registry: VoiceRegistry, **fields: object) -> VoiceEntry:
    defaults: dict[str, object] = {"audio": wav_clip(3.0, 180), "engine": "voxcpm", "ref_text": "a short reference"}
    return registry.register(Registration(**{**defaults, **fields}))[0]  # type: ignore[arg-type]


def options(engine: VoxCPMEngine, **params: object) -> SynthesisOptions:
    return SynthesisOptions(resolve_language("en"), {**VOXCPM.param_defaults(), **params})  # type: ignore[dict-item]


def test_loads_at_48khz_with_its_checkpoint(engine: VoxCPMEngine, tiny_voxcpm: Path) -> None:
    described = engine.describe()
    assert engine.sample_rate == 48_000 and described["loaded"] is True and described["device"] == "cpu"
    assert str(described["checkpoint"]).startswith(f"voxcpm:{tiny_voxcpm}@")
    assert described["memory"]["weights_bytes"] > 0  # type: ignore[index]


@pytest.mark.slow
def test_prompt_modes(engine: VoxCPMEngine, registry: VoiceRegistry) -> None:
    continuation = engine.prepare_voice(register(registry))
    assert continuation.prompt == continuation.reference and continuation.prompt_text == "a short reference"
    xvec = engine.prepare_voice(register(registry, ref_text="", x_vector_only_mode=True))
    assert xvec.prompt is None and xvec.prompt_text is None
    seeded = engine.prepare_voice(register(registry, seed_audio=wav_clip(1.0, 330), seed_text="你好"))
    assert seeded.prompt is not None and seeded.prompt.name == "seed.wav" and seeded.prompt_text == "你好"
    for prompt in (continuation, xvec, seeded):
        pieces = list(engine.stream("Hello world. This is a test.", prompt, options(engine)))
        assert len(pieces) == MAX_LEN and all(len(p) == PIECE and p.dtype == np.float32 for p in pieces)
        assert all(np.isfinite(p).all() for p in pieces)


def test_reference_is_trimmed_once_and_kept_per_model(engine: VoxCPMEngine, registry: VoiceRegistry) -> None:
    voice = register(registry, audio=wav_clip(5.0, 250))
    prompt = engine.prepare_voice(voice)
    assert prompt.reference.parent == voice.folder / "prompts" / engine.model_key
    assert sf.info(str(prompt.reference)).duration == pytest.approx(2.0)  # max_ref_seconds
    written = prompt.reference.stat().st_mtime_ns
    assert engine.prepare_voice(voice).reference.stat().st_mtime_ns == written


@pytest.mark.slow
def test_the_encoded_prompt_is_built_once_per_voice(engine: VoxCPMEngine, registry: VoiceRegistry) -> None:
    prompt = engine.prepare_voice(register(registry, audio=wav_clip(1.5, 410)))
    before = engine.describe()["prepared_voices"]
    for text in ("One.", "Two."):
        list(engine.stream(text, prompt, options(engine)))
    assert engine.describe()["prepared_voices"] == before + 1  # type: ignore[operator]


def test_normalize_and_parameters(engine: VoxCPMEngine, registry: VoiceRegistry) -> None:
    prompt = engine.prepare_voice(register(registry, audio=wav_clip(1.2, 290)))
    pieces = list(engine.stream("It costs $12.50 on 3/4.", prompt, options(engine, normalize=True, cfg_value=3.0)))
    assert len(pieces) == MAX_LEN
    fewer_steps = list(engine.stream("Quick.", prompt, options(engine, inference_timesteps=2)))
    assert len(fewer_steps) == MAX_LEN


def test_denoise_needs_a_denoiser(engine: VoxCPMEngine) -> None:
    with pytest.raises(InvalidInput) as err:
        engine.check_params({**VOXCPM.param_defaults(), "denoise": True})
    assert err.value.code == "denoiser_unavailable"
    engine.check_params(VOXCPM.param_defaults())


def test_only_registered_clips_are_voices(engine: VoxCPMEngine) -> None:
    with pytest.raises(InvalidInput) as err:
        engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))
    assert err.value.code == "wrong_engine"
    assert "VoxCPM clones from a registered clip" in err.value.message


@pytest.mark.slow
def test_unload_and_reload(tiny_voxcpm: Path, registry: VoiceRegistry) -> None:
    voxcpm = voxcpm_engine(str(tiny_voxcpm))
    voxcpm.load()
    checkpoint = voxcpm.checkpoint
    prompt = voxcpm.prepare_voice(register(registry, audio=wav_clip(1.0, 500)))
    list(voxcpm.stream("Before.", prompt, options(voxcpm)))
    voxcpm.unload()
    assert not voxcpm.loaded and voxcpm.describe()["prepared_voices"] == 0
    assert voxcpm.describe()["memory"] == {"weights_bytes": 0}
    voxcpm.load()
    assert voxcpm.checkpoint == checkpoint
    assert len(list(voxcpm.stream("After.", prompt, options(voxcpm)))) == MAX_LEN


def test_offline_hub_id_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(EngineLoadError, match="POLYTTS_VOXCPM_MODEL"):
        voxcpm_engine("openbmb/VoxCPM2").load()
    assert time.monotonic() - started < 10


def test_a_missing_denoiser_folder_is_a_load_error(tiny_voxcpm: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineLoadError, match="POLYTTS_VOXCPM_DENOISER"):
        voxcpm_engine(str(tiny_voxcpm), denoiser=tmp_path / "no-denoiser").load()


@pytest.mark.slow
def test_voxcpm_imports_beside_a_broken_torchaudio(tmp_path: Path) -> None:
    """The CUDA torchaudio wheel pip picks next to the CPU torch fails at import; voxcpm must import anyway."""
    fake = tmp_path / "torchaudio"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise OSError('libc10_cuda.so: cannot open shared object file')\n")
    check = (
        "from engines.voxcpm.upstream import import_voxcpm\n"
        "voxcpm = import_voxcpm()\n"
        "import torchaudio\n"
        "try:\n    torchaudio.load\nexcept RuntimeError as e:\n    assert 'does not use it' in str(e)\n"
        "else:\n    raise SystemExit('the stub answered')\n"
        "assert hasattr(voxcpm, 'VoxCPM')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
