"""The Kokoro engine on its ONNX backend and the real int8 model (assembled from PyPI), without the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engines.base import BlendVoice, BuiltinVoice, EngineCaps, EngineContext, EngineLoadError, SynthesisOptions
from engines.blends import BlendPart, canonical_blend
from engines.kokoro.backend import MAX_TOKENS
from engines.kokoro.config import KokoroSettings
from engines.kokoro.engine import SPEC as KOKORO
from engines.kokoro.engine import KokoroEngine, choose_backend
from errors import InvalidInput, NotFound
from models.assemble import model_sum
from tests.support.voices import npy, pack_values
from text.languages import resolve_language
from text.normalize import normalize_english
from voicebank.registration import Registration
from voicebank.registry import VoiceRegistry
from voicebank.voice_entry import VoiceEntry

CAPS = EngineCaps(first_chunk_chars=60, max_chunk_chars=220)
ENGLISH = SynthesisOptions(language=resolve_language("en"))


def onnx_engine(model_dir: Path, max_packs: int = 64) -> KokoroEngine:
    return KokoroEngine(
        backend="onnx",
        runtime="cpu",
        onnx_dir=model_dir,
        torch_model="",
        threads=1,
        max_packs=max_packs,
        caps=CAPS,
    )


@pytest.fixture(scope="module")
def engine(assembled_model: Path) -> Iterator[KokoroEngine]:
    kokoro = onnx_engine(assembled_model)
    kokoro.load()
    yield kokoro
    kokoro.unload()


def speak(engine: KokoroEngine, text: str, options: SynthesisOptions = ENGLISH) -> np.ndarray:
    handle = engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))
    return np.concatenate(list(engine.stream(text, handle, options)))


def test_builtin_packs_are_listed_before_loading(assembled_model: Path) -> None:
    fresh = onnx_engine(assembled_model)
    names = {v.name: v.language for v in fresh.builtin_voices()}
    # The 54 stock voices, language and gender from their names, listed from data/kokoro-voices without loading.
    assert len(names) == 54 and names["af_heart"] == "en-us" and names["bm_george"] == "en-gb"
    assert {name: names[name] for name in ("jf_alpha", "jm_kumo", "ef_dora", "ff_siwis", "zf_xiaobei")} == {
        "jf_alpha": "ja",
        "jm_kumo": "ja",
        "ef_dora": "es",
        "ff_siwis": "fr-fr",
        "zf_xiaobei": "zh",
    }
    assert {v.gender for v in fresh.builtin_voices() if v.name in ("af_heart", "am_adam")} == {"female", "male"}
    assert not fresh.loaded
    digest = model_sum(assembled_model)
    assert digest is not None and fresh.checkpoint == f"kokoro-82m-int8-onnx@{digest[:16]}"  # the file as written


def test_english_speech_at_24khz(engine: KokoroEngine) -> None:
    audio = speak(engine, "Hello from the embedded model.")
    assert audio.dtype == np.float32 and engine.sample_rate == 24_000
    assert 1.0 < len(audio) / 24_000 < 6.0
    assert 0.05 < np.abs(audio).max() <= 1.0


@pytest.mark.slow
def test_speed_changes_duration(engine: KokoroEngine) -> None:
    text = "Speed changes how long this takes."
    slow = speak(engine, text, SynthesisOptions(language=ENGLISH.language, params={"speed": 0.8}))
    fast = speak(engine, text, SynthesisOptions(language=ENGLISH.language, params={"speed": 1.6}))
    assert len(fast) < 0.75 * len(slow)


def test_phonemes_over_the_model_limit_are_windowed_at_spaces(engine: KokoroEngine) -> None:
    phonemes = " ".join(["hˈɛloʊ"] * 150)  # about 1,050 phonemes
    windows = list(engine._token_windows(phonemes))
    assert len(windows) == 3 and all(len(w) <= MAX_TOKENS for w in windows)
    vocab = engine.backend.vocab  # type: ignore[union-attr]
    space = vocab[" "]
    assert all(w[-1] == space for w in windows[:-1])  # cut after a word, never inside one
    assert sum(map(len, windows)) == len([p for p in phonemes if p in vocab])


@pytest.mark.slow
def test_other_espeak_languages_speak(engine: KokoroEngine) -> None:
    for code, text in (("es", "Hola, buenos días."), ("fr", "Bonjour à tous."), ("en-gb", "Good afternoon.")):
        audio = speak(engine, text, SynthesisOptions(language=resolve_language(code)))
        assert len(audio) > 12_000, code


def test_voice_errors(engine: KokoroEngine, tmp_path: Path) -> None:
    with pytest.raises(NotFound) as missing:
        engine.prepare_voice(BuiltinVoice("af_nobody", "en-us", "kokoro"))
    assert missing.value.code == "voice_not_found"
    registered = VoiceEntry("0123456789abcdef", "voxcpm", "hi", False, None, False, 0.0, 1.0, 16_000, tmp_path)
    with pytest.raises(InvalidInput) as err:
        engine.prepare_voice(registered)
    assert err.value.code == "wrong_engine"


@pytest.mark.slow
def test_unload_and_reload(assembled_model: Path) -> None:
    kokoro = onnx_engine(assembled_model)
    kokoro.load()
    assert kokoro.loaded and kokoro.describe()["loaded"] is True
    kokoro.unload()
    assert not kokoro.loaded
    kokoro.load()
    assert len(speak(kokoro, "Again.")) > 0


def test_missing_model_is_a_clear_load_error(tmp_path: Path) -> None:
    with pytest.raises(EngineLoadError, match="python -m models.assemble"):
        onnx_engine(tmp_path).load()


def test_backend_choice() -> None:
    assert choose_backend("onnx", "cuda") == "onnx"
    assert choose_backend("torch", None) == "torch"
    assert choose_backend("auto", "cuda") == "torch"
    assert choose_backend("auto", "mps") == "torch"
    assert choose_backend("auto", None) == "onnx"


def test_build_takes_kokoros_settings_and_the_context(tmp_path: Path) -> None:
    """The ONNX folder is POLYTTS_KOKORO_ONNX_DIR, else the assembled one under the models folder; the chunk caps
    come from the service's settings."""
    context = EngineContext(
        runtime="cpu",
        models_dir=tmp_path,
        max_voices_mem=4,
        mlx_cache_mb=0,
        stream_interval=0.5,
        first_chunk_chars=40,
        chunk_chars=90,
    )
    engine = KOKORO.build(KokoroSettings(kokoro_backend="onnx", kokoro_onnx_dir=None, onnx_threads=3), context)
    assert isinstance(engine, KokoroEngine)
    assert engine.onnx_dir == tmp_path / "kokoro-82m-int8" and engine.threads == 3
    assert engine.caps == EngineCaps(first_chunk_chars=40, max_chunk_chars=90)
    chosen = KOKORO.build(KokoroSettings(kokoro_backend="onnx", kokoro_onnx_dir=tmp_path / "elsewhere"), context)
    assert isinstance(chosen, KokoroEngine) and chosen.onnx_dir == tmp_path / "elsewhere"


def test_describe_names_backend_checkpoint_and_g2p(engine: KokoroEngine) -> None:
    described = engine.describe()
    assert described["backend"] == "onnx" and described["device"] == "cpu"
    digest, g2p = model_sum(engine.onnx_dir), described["g2p"]
    assert digest is not None and described["checkpoint"] == f"kokoro-82m-int8-onnx@{digest[:16]}"
    assert isinstance(g2p, dict) and g2p["english"] == "espeak"  # no spaCy model here


def test_chinese_speaks_through_misaki(engine: KokoroEngine) -> None:
    audio = speak(engine, "你好，世界。", SynthesisOptions(language=resolve_language("zh")))
    assert len(audio) > 12_000


# A greeting per language of the stock voices: a word or two is enough to hear a voice, and 54 of them add up.
PHRASES = {
    "en-us": "Hello.",
    "en-gb": "Hello.",
    "es": "Hola.",
    "fr-fr": "Bonjour.",
    "hi": "नमस्ते।",
    "it": "Ciao.",
    "pt-br": "Olá.",
    "ja": "こんにちは。",
    "zh": "你好。",
}


@pytest.mark.slow
def test_every_stock_voice_speaks(engine: KokoroEngine) -> None:
    """Each of the 54 stock voices, on the real int8 model, in its own language: the default install (requirements.txt)
    has every stock language's G2P, Japanese and Chinese included."""
    spoken = set()
    for voice in engine.builtin_voices():
        language = resolve_language(voice.language)  # would refuse a language whose G2P is not installed
        handle = engine.prepare_voice(voice)
        audio = np.concatenate(list(engine.stream(PHRASES[language.code], handle, SynthesisOptions(language))))
        # Some voices peak a little over full scale (to_pcm16 clips them); silence or garbage would fail here.
        assert 0.3 < len(audio) / 24_000 < 5.0 and 0.02 < np.abs(audio).max() < 1.5, voice.name
        spoken.add(voice.name)
    assert len(spoken) == 54


@pytest.mark.slow
def test_english_is_normalized_unless_asked_not_to(engine: KokoroEngine) -> None:
    handle = engine.prepare_voice(BuiltinVoice("af_heart", "en-us", "kokoro"))
    raw = "It cost $1,234.56 on 2024-03-03."

    def spoken_text(text: str, normalize: bool) -> str:
        options = SynthesisOptions(resolve_language("en"), {"speed": 1.0, "normalize": normalize})
        return engine.spoken_text(text, options).text

    def audio(text: str) -> np.ndarray:
        options = SynthesisOptions(resolve_language("en"), {"speed": 1.0})
        return np.concatenate(list(engine.stream(text, handle, options)))

    spoken = normalize_english(raw)
    assert (
        spoken
        == "It cost one thousand two hundred thirty-four dollars and fifty-six cents on March third, twenty twenty-four."
    )
    assert spoken_text(raw, True) == spoken  # what the model hears is the normalized text
    assert spoken_text(raw, False) == raw  # normalize: false leaves the text alone
    # `stream` speaks its text as it is: normalizing is done once, before (a normalized text is not read again)
    date = "On 2024-03-03."
    assert not np.array_equal(audio(date), audio(normalize_english(date)))


@pytest.mark.slow
def test_inference_returns_each_tokens_frames(engine: KokoroEngine) -> None:
    backend = engine.backend
    assert backend is not None
    tokens = next(engine._token_windows(engine.g2p.phonemize("Timed words.", ENGLISH.language)))  # type: ignore[union-attr]
    style = engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))[len(tokens) - 1]
    audio, durations = backend.infer_timed(tokens, style, 1.0)
    assert durations is not None and durations.dtype == np.int64 and durations.shape == (len(tokens) + 2,)
    assert durations.min() >= 1 and durations.sum() * 600 == len(audio)  # 600 samples (25 ms) per frame
    assert np.array_equal(backend.infer(tokens, style, 1.0), audio)
    _, faster = backend.infer_timed(tokens, style, 2.0)  # speed is applied before rounding
    assert faster.sum() < 0.7 * durations.sum()


def blend(*voices: BuiltinVoice | VoiceEntry) -> BlendVoice:
    """An equal mix of `voices`, as the catalog resolves a formula."""
    parts = [BlendPart(v.voice_id if isinstance(v, VoiceEntry) else v.name, 1.0) for v in voices]
    return BlendVoice(canonical_blend(parts), "kokoro", tuple((v, 1 / len(voices)) for v in voices))


@pytest.mark.slow
def test_packs_in_memory_are_bounded_and_one_pushed_out_speaks_again(assembled_model: Path, tmp_path: Path) -> None:
    """Every distinct blend is a pack of its own (0.52 MB): POLYTTS_KOKORO_MAX_PACKS_MEM bounds how many stay, and a
    blend pushed out, a registered pack among its parts, is mixed again, the same, when it is next asked for."""
    kokoro = onnx_engine(assembled_model, max_packs=4)
    kokoro.load()
    registered, _ = VoiceRegistry(tmp_path / "voices").register(
        Registration(audio=b"", engine="kokoro", voice_pack=npy(pack_values(3)), voice_pack_filename="mine.npy")
    )
    stock = kokoro.builtin_voices()
    first = blend(registered, stock[0])
    mixed = kokoro.prepare_voice(first)
    options = SynthesisOptions(resolve_language("en"))
    spoken = np.concatenate(list(kokoro.stream("A blend.", mixed, options)))
    for a, b in zip(stock[1:21], stock[2:22]):
        kokoro.prepare_voice(blend(a, b))
        assert len(kokoro._voices) <= 4
    assert len(kokoro._voices) == 4
    again = kokoro.prepare_voice(first)
    assert again is not mixed and np.array_equal(again, mixed)  # pushed out, then mixed again from its parts
    assert np.array_equal(np.concatenate(list(kokoro.stream("A blend.", again, options))), spoken)
    kokoro.unload()
    assert len(kokoro._voices) == 0
