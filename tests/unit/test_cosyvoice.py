"""CosyVoice 2 on PyTorch on a tiny random checkpoint built at test time, loaded through the package's own classes."""

from __future__ import annotations

import importlib
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from engines.base import BuiltinVoice, EngineCaps, EngineLoadError, SynthesisOptions
from engines.cosyvoice.engine import SPEC as COSYVOICE
from engines.cosyvoice.engine import CosyVoiceEngine
from engines.cosyvoice.upstream import INFERENCE_KEYS, import_cosyvoice, inference_config
from errors import InvalidInput
from tests.support.clips import wav_clip
from tests.support.tiny_cosyvoice import LENGTH_RATIO, SAMPLES_PER_TOKEN
from tests.unit.test_mlx import register
from text.languages import resolve_language
from voicebank.ids import compute_voice_id
from voicebank.registry import VoiceRegistry

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models run fastest on one thread

HOP, LOOKAHEAD = 25, 3  # CosyVoice 2's tokens per streamed chunk, and the flow's look-ahead
PROMPT_TOKENS = 25  # a 1 s clip: 25 speech tokens, a whole chunk (the first piece needs no padding)
TEXT = "Hi."  # 3 text tokens (one per byte): 60 speech tokens
PIECES = [HOP * SAMPLES_PER_TOKEN - 3840, HOP * SAMPLES_PER_TOKEN, 10 * SAMPLES_PER_TOKEN + 3840]
"""Upstream's schedule for 60 tokens: a piece at 28 tokens and at 53, the rest at the end; HiFT holds back 8 mel
frames (3840 samples) of each piece until the next."""


def cosyvoice_engine(model: str | Path, **overrides: object) -> CosyVoiceEngine:
    options: dict[str, object] = {
        "model": str(model),
        "runtime": "cpu",
        "max_voices": 2,
        "max_ref_seconds": 2.0,
        "max_tokens": 1500,
        "caps": EngineCaps(0, 120, 0, interleavable=False),
    }
    return CosyVoiceEngine(**{**options, **overrides})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def engine(tiny_cosyvoice: Path) -> Iterator[CosyVoiceEngine]:
    cosyvoice = cosyvoice_engine(tiny_cosyvoice)
    cosyvoice.load()
    yield cosyvoice
    cosyvoice.unload()


def options(language: str = "en", **params: object) -> SynthesisOptions:
    return SynthesisOptions(resolve_language(language), {**COSYVOICE.param_defaults(), **params})  # type: ignore[dict-item]


def encoded(engine: CosyVoiceEngine, text: str) -> list[int]:
    """`text` as the checkpoint's tokenizer encodes it (the tiny one: one token per UTF-8 byte)."""
    return list(engine._cosyvoice.frontend.tokenizer.encode(text))


class LlmCalls:
    """What the engine hands the package's LLM (its `inference`, called through) and how many steps it decodes."""

    def __init__(self, engine: CosyVoiceEngine, monkeypatch: pytest.MonkeyPatch) -> None:
        llm = engine._cosyvoice.model.llm
        self.prompts: list[dict[str, Any]] = []
        self.steps = 0
        inference = llm.inference

        def recorded(**inputs: Any) -> Any:
            self.prompts.append({name: value.clone() for name, value in inputs.items()})
            return inference(**inputs)

        monkeypatch.setattr(llm, "inference", recorded)
        self.hook = llm.llm_decoder.register_forward_hook(self._step)

    def _step(self, *_: object) -> None:
        self.steps += 1

    def last(self, name: str) -> list[int]:
        return [int(t) for t in self.prompts[-1][name].flatten()]


@pytest.fixture
def calls(engine: CosyVoiceEngine, monkeypatch: pytest.MonkeyPatch) -> Iterator[LlmCalls]:
    recorded = LlmCalls(engine, monkeypatch)
    yield recorded
    recorded.hook.remove()


def test_every_weight_loads_through_the_package(engine: CosyVoiceEngine, tiny_cosyvoice: Path) -> None:
    model = engine._cosyvoice.model
    for part, name in ((model.llm, "llm.pt"), (model.flow, "flow.pt"), (model.hift, "hift.pt")):
        loaded = part.state_dict()
        for key, tensor in torch.load(tiny_cosyvoice / name).items():
            assert torch.equal(loaded[key], tensor), (name, key)
    described = engine.describe()
    assert engine.sample_rate == 24_000 and described["device"] == "cpu" and described["loaded"] is True
    assert str(described["checkpoint"]).startswith(f"cosyvoice:{tiny_cosyvoice}@")
    assert described["model"] == str(tiny_cosyvoice)
    assert described["memory"] == {
        "weights_bytes": engine.footprint,
        "footprint_bytes": engine.footprint,
        "footprint_measured": "weights only",
    }
    assert engine.footprint > 10_000_000


def test_only_what_inference_reads_of_the_configuration_is_built(engine: CosyVoiceEngine, tiny_cosyvoice: Path) -> None:
    """The checkpoint's yaml also declares GAN discriminators and a data pipeline (torchaudio, pyarrow, pyworld,
    matplotlib): none of it is built or even imported."""
    kept = inference_config((tiny_cosyvoice / "cosyvoice2.yaml").read_text())
    keys = {line.split(":")[0] for line in kept.splitlines() if line and not line[0].isspace()}
    assert set(INFERENCE_KEYS) <= keys and "llm_input_size" in keys and "chunk_size" in keys
    assert not keys & {"hifigan", "data_pipeline", "parquet_opener", "train_conf", "__set_seed1"}
    assert "!new:cosyvoice.llm.llm.Qwen2LM" in kept and "!ref <qwen_pretrain_path>" in kept
    for training in ("cosyvoice.hifigan.discriminator", "cosyvoice.dataset.processor", "matcha.hifigan.models"):
        assert training not in sys.modules


@pytest.mark.slow
def test_zero_shot_with_and_without_a_transcript(
    engine: CosyVoiceEngine, registry: VoiceRegistry, calls: LlmCalls
) -> None:
    """The LLM continues the clip's speech tokens after its transcript; an empty transcript is passed as it is."""
    clip, silent = wav_clip(1.0, 180), wav_clip(1.0, 190)
    with_text = register(registry, "cosyvoice", audio=clip, ref_text="a reference")
    without = register(registry, "cosyvoice", audio=silent, ref_text="")
    assert with_text.voice_id == compute_voice_id(clip, "cosyvoice") and without.voice_id == compute_voice_id(
        silent, "cosyvoice"
    )
    for voice, transcript in ((with_text, "a reference"), (without, "")):
        prompt = engine.prepare_voice(voice)
        stored = sorted(p.name for p in (voice.folder / "prompts" / engine.model_key).iterdir())
        assert stored == ["embedding.npy", "speech_feat.npy", "speech_tokens.npy"]
        assert prompt.speech_tokens.shape == (1, PROMPT_TOKENS) and prompt.speech_feat.shape == (1, 50, 80)
        assert prompt.embedding.shape == (1, 192) and not prompt.cross_lingual
        pieces = list(engine.stream(TEXT, prompt, options()))
        assert [len(p) for p in pieces] == PIECES
        assert all(p.dtype == np.float32 and np.isfinite(p).all() and np.abs(p).max() > 0.01 for p in pieces)
        assert calls.last("prompt_text") == encoded(engine, transcript)
        assert calls.last("prompt_speech_token") == [int(t) for t in prompt.speech_tokens.flatten()]
        assert calls.last("text") == encoded(engine, TEXT) and len(encoded(engine, TEXT)) == len(TEXT)
        assert calls.steps == len(TEXT) * LENGTH_RATIO
        calls.steps = 0


def test_cross_lingual_takes_only_the_timbre(engine: CosyVoiceEngine, registry: VoiceRegistry, calls: LlmCalls) -> None:
    xvec = engine.prepare_voice(register(registry, "cosyvoice", audio=wav_clip(1.0, 200), x_vector_only_mode=True))
    spoken = engine.prepare_voice(register(registry, "cosyvoice", audio=wav_clip(1.0, 210)))
    assert xvec.cross_lingual and not spoken.cross_lingual
    for prompt, params in ((xvec, {}), (spoken, {"cross_lingual": True})):
        pieces = list(engine.stream("好", prompt, options("zh", **params)))
        assert calls.last("prompt_text") == [] and calls.last("prompt_speech_token") == []
        assert sum(len(p) for p in pieces) == len("好".encode()) * LENGTH_RATIO * SAMPLES_PER_TOKEN


def test_an_instruction_is_the_llms_prompt(engine: CosyVoiceEngine, registry: VoiceRegistry, calls: LlmCalls) -> None:
    prompt = engine.prepare_voice(register(registry, "cosyvoice", audio=wav_clip(1.0, 220), ref_text="transcript"))
    pieces = list(engine.stream(TEXT, prompt, options(instruct="用开心的语气说")))
    assert calls.last("prompt_text") == encoded(engine, "用开心的语气说<|endofprompt|>")
    end_of_prompt = engine._cosyvoice.frontend.tokenizer.tokenizer.convert_tokens_to_ids("<|endofprompt|>")
    assert calls.last("prompt_text")[-1] == end_of_prompt and end_of_prompt not in encoded(engine, "用开心的语气说")
    assert calls.last("prompt_speech_token") == []  # upstream's instruct2: the clip speaks through the flow only
    assert [len(p) for p in pieces] == PIECES


def test_pieces_arrive_while_the_generation_runs_and_closing_stops_it(
    engine: CosyVoiceEngine, registry: VoiceRegistry, calls: LlmCalls
) -> None:
    prompt = engine.prepare_voice(register(registry, "cosyvoice", audio=wav_clip(1.0, 230)))
    stream = engine.stream("Streaming.", prompt, options())  # 200 tokens to come
    assert len(next(stream)) == PIECES[0]
    assert calls.steps == HOP + LOOKAHEAD  # the first piece, with the rest of the generation still to run
    assert len(engine._cosyvoice.model.hift_cache_dict) == 1
    stream.close()
    assert calls.steps == HOP + LOOKAHEAD  # stopped where it was
    assert engine._cosyvoice.model.hift_cache_dict == {}


def test_a_generation_is_cut_at_the_nodes_bound(
    tiny_cosyvoice: Path, registry: VoiceRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    bounded = cosyvoice_engine(tiny_cosyvoice, max_tokens=30)
    bounded.load()
    try:
        prompt = bounded.prepare_voice(register(registry, "cosyvoice", audio=wav_clip(1.0, 260)))
        pieces = list(bounded.stream(TEXT, prompt, options()))  # 60 tokens unbounded
        assert [len(p) for p in pieces] == [PIECES[0], 5 * SAMPLES_PER_TOKEN + 3840]
        assert "POLYTTS_COSYVOICE_MAX_TOKENS" in caplog.text
        bounded.probe()  # what CUDA measures its footprint over: the longest generation's last decode
        assert bounded._cosyvoice.model.hift_cache_dict == {}
    finally:
        bounded.unload()


@pytest.mark.slow
def test_the_stream_follows_upstreams_schedule(engine: CosyVoiceEngine, registry: VoiceRegistry) -> None:
    """The chunks the engine decodes are those of upstream's `CosyVoice2Model.tts(stream=True)` for the same speech
    tokens (its voice-conversion path, which streams given tokens on the same schedule), with a prompt that needs
    padding to a whole chunk."""
    model = engine._cosyvoice.model
    prompt = engine.prepare_voice(register(registry, "cosyvoice", audio=wav_clip(1.3, 240)))  # 32 prompt tokens
    assert prompt.speech_tokens.shape[1] == 32
    schedule: list[tuple[int, int, bool]] = []
    token2wav = model.token2wav

    def recorded(**inputs: Any) -> Any:
        schedule.append((inputs["token"].shape[1], inputs["token_offset"], inputs["finalize"]))
        return token2wav(**inputs)

    model.token2wav = recorded
    try:
        ours = list(engine.stream("Hello.", prompt, options()))  # 120 tokens
        generated = schedule[-1][0]
        assert generated == 6 * LENGTH_RATIO
        ours_schedule, schedule[:] = schedule[:], []
        tokens = torch.randint(0, 6561, (1, generated), dtype=torch.int32)
        upstream = list(
            model.tts(
                source_speech_token=tokens,
                flow_prompt_speech_token=prompt.speech_tokens,
                prompt_speech_feat=prompt.speech_feat,
                flow_embedding=prompt.embedding,
                stream=True,
            )
        )
    finally:
        del model.token2wav
    assert ours_schedule == schedule == [(46, 0, False), (71, 43, False), (96, 68, False), (120, 93, True)]
    assert [len(p) for p in ours] == [p["tts_speech"].shape[1] for p in upstream]


def test_sampling_parameters_are_the_checkpoints_and_validated(
    engine: CosyVoiceEngine, registry: VoiceRegistry
) -> None:
    assert COSYVOICE.param_defaults() == {
        "instruct": "",
        "cross_lingual": False,
        "normalize": True,
        "top_p": 0.8,
        "top_k": 25,
        "repetition_window": 10,
        "repetition_ratio": 0.1,
    }
    prompt = engine.prepare_voice(register(registry, "cosyvoice", audio=wav_clip(1.0, 250)))
    chosen = options(top_p=0.5, top_k=3, repetition_window=4, repetition_ratio=0.5)
    assert sum(len(p) for p in engine.stream(TEXT, prompt, chosen)) == sum(PIECES)
    assert engine._cosyvoice.model.llm.sampling.keywords == {"top_p": 0.5, "top_k": 3, "win_size": 4, "tau_r": 0.5}
    for bad in (
        {"top_p": 0},
        {"top_p": 1.5},
        {"top_k": 0},
        {"top_k": 2.5},
        {"repetition_window": 0},
        {"repetition_ratio": 0},
        {"repetition_ratio": True},
        {"instruct": "x" * 4097},
        {"cross_lingual": "maybe"},
    ):
        with pytest.raises(ValidationError):
            COSYVOICE.params.model_validate(bad)


def test_languages_and_text_normalization(engine: CosyVoiceEngine) -> None:
    for code in ("en", "en-gb", "zh", "ja"):
        engine.check_language(resolve_language(code))
    with pytest.raises(InvalidInput) as err:
        engine.check_language(resolve_language("fr"))
    assert err.value.code == "unsupported_language" and "French" in err.value.message
    assert engine.spoken_text("It costs $4.50.", options()).text == "It costs four dollars and fifty cents."
    assert engine.spoken_text("It costs $4.50.", options(normalize=False)).text == "It costs $4.50."
    assert engine._frontend_text("共3个，价格是12.5元", {"normalize": True}) == "共三个，价格是十二点五元"
    assert engine._frontend_text("共3个", {"normalize": False}) == "共3个"


def test_prepared_voices_are_bounded_in_memory_and_reused_after_a_restart(
    engine: CosyVoiceEngine, registry: VoiceRegistry, tiny_cosyvoice: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    voices = [register(registry, "cosyvoice", audio=wav_clip(1.0, 300 + 10 * i)) for i in range(3)]
    first = [engine.prepare_voice(voice) for voice in voices]
    assert engine.describe()["prepared_voices"] == 2  # max_voices
    artefacts = sorted((voices[0].folder / "prompts" / engine.model_key).iterdir())
    written = [p.stat().st_mtime_ns for p in artefacts]

    restarted = cosyvoice_engine(tiny_cosyvoice)
    restarted.load()
    try:
        assert restarted.model_key == engine.model_key

        def refuse(clip: Path) -> None:
            raise AssertionError("a prepared voice was computed again")

        monkeypatch.setattr(restarted, "_extract", refuse)
        again = restarted.prepare_voice(voices[0])
        assert [p.stat().st_mtime_ns for p in artefacts] == written
        for name in ("speech_tokens", "speech_feat", "embedding"):
            assert torch.equal(getattr(again, name), getattr(first[0], name)), name
        assert [len(p) for p in restarted.stream(TEXT, again, options())] == PIECES
    finally:
        restarted.unload()


def test_unload_releases_and_reload_gives_the_same_checkpoint(tiny_cosyvoice: Path, registry: VoiceRegistry) -> None:
    cosyvoice = cosyvoice_engine(tiny_cosyvoice)
    cosyvoice.load()
    checkpoint = cosyvoice.checkpoint
    voice = register(registry, "cosyvoice", audio=wav_clip(1.0, 500))
    cosyvoice.prepare_voice(voice)
    cosyvoice.unload()
    assert not cosyvoice.loaded and cosyvoice.describe()["prepared_voices"] == 0
    assert cosyvoice.describe()["memory"]["weights_bytes"] == 0  # type: ignore[index]
    assert cosyvoice.checkpoint == checkpoint
    cosyvoice.load()
    assert cosyvoice.checkpoint == checkpoint
    assert [len(p) for p in cosyvoice.stream(TEXT, cosyvoice.prepare_voice(voice), options())] == PIECES
    cosyvoice.unload()


def test_offline_hub_id_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(EngineLoadError, match="POLYTTS_COSYVOICE_MODEL"):
        cosyvoice_engine("FunAudioLLM/CosyVoice2-0.5B").load()
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda folder: (folder / "cosyvoice2.yaml").rename(folder / "cosyvoice3.yaml"), "is a CosyVoice 3 checkpoint"),
        (lambda folder: (folder / "speech_tokenizer_v2.onnx").unlink(), "has no speech_tokenizer_v2.onnx"),
        (lambda folder: shutil.rmtree(folder / "CosyVoice-BlankEN"), "has no CosyVoice-BlankEN/"),
    ],
)
def test_checkpoints_it_cannot_serve_are_refused(
    tiny_cosyvoice: Path, tmp_path: Path, change: Any, reason: str
) -> None:
    folder = tmp_path / "other"
    shutil.copytree(tiny_cosyvoice, folder)
    change(folder)
    with pytest.raises(EngineLoadError, match=reason):
        cosyvoice_engine(folder).load()


def test_only_registered_clips_are_voices(engine: CosyVoiceEngine) -> None:
    with pytest.raises(InvalidInput) as err:
        engine.prepare_voice(BuiltinVoice("jf_alpha", "ja", "kokoro"))
    assert err.value.code == "wrong_engine" and "CosyVoice clones from a registered clip" in err.value.message


def test_a_transcript_is_optional_for_cosyvoice_alone(registry: VoiceRegistry) -> None:
    clip = wav_clip(1.0, 600)
    for mode in (False, True):
        entry = register(registry, "cosyvoice", audio=clip, ref_text="", x_vector_only_mode=mode)
        assert entry.voice_id == compute_voice_id(clip, "cosyvoice", x_vector_only_mode=mode)
    with pytest.raises(InvalidInput) as err:
        register(registry, "voxcpm", audio=clip, ref_text="")
    assert err.value.code == "ref_text_required"


def test_the_filterbank_is_kaldis() -> None:
    """Without torchaudio, the speaker embedding's features come from the port of torchaudio's Kaldi fbank:
    the same features as Kaldi's own (kaldi-native-fbank), to float32 rounding."""
    import kaldi_native_fbank as knf

    import_cosyvoice()
    kaldi = importlib.import_module("torchaudio.compliance.kaldi")  # the real one where it imports, else the port
    samples = np.frombuffer(wav_clip(2.0, 230), dtype=np.int16, offset=44).astype(np.float32) / 32768
    ours = kaldi.fbank(torch.from_numpy(samples).unsqueeze(0), num_mel_bins=80, dither=0, sample_frequency=16000)
    config = knf.FbankOptions()
    config.frame_opts.dither = 0
    config.mel_opts.num_bins = 80
    reference = knf.OnlineFbank(config)
    reference.accept_waveform(16000, samples.tolist())
    reference.input_finished()
    kaldis = np.stack([reference.get_frame(i) for i in range(reference.num_frames_ready)])
    assert ours.shape == kaldis.shape == (198, 80)
    np.testing.assert_allclose(ours.numpy(), kaldis, atol=1e-3)
