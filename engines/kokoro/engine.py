"""Kokoro-82M: one engine, three backends (PyTorch for CUDA/MPS hosts, ONNX Runtime on the CPU, MLX on Apple
Silicon).

Every backend shares the G2P, the chunking, the voices (built-in packs, blends, uploaded packs) and the caches;
they differ only in how a window of phoneme tokens and a style vector become audio (engines/kokoro/backend.py).
`auto` takes MLX on the MLX runtime, PyTorch when torch sees CUDA or MPS and ONNX Runtime otherwise, decided once
when the engine first loads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np

from audio.word_timings import WordClock, WordTiming, align_words
from engines.artefacts import PreparedVoices
from engines.base import (
    BlendVoice,
    BuiltinVoice,
    Engine,
    EngineCaps,
    EngineContext,
    EngineSpec,
    PackFormat,
    Param,
    SynthesisOptions,
    VoiceRef,
)
from engines.device import torch_accelerator, torch_device, torch_installed, uses_mlx
from engines.g2p import G2P, choose_english_route
from engines.kokoro.backend import MAX_TOKENS, BackendName, KokoroBackend
from engines.kokoro.config import KokoroParams, KokoroSettings
from engines.kokoro.onnx_routes import RouteSetting
from engines.kokoro.stock_voices import StockVoices
from engines.kokoro.voicepacks import mix, pack_id, read_pack, read_stored_pack, stored_pack_problem
from errors import InvalidInput
from text.languages import Language, voice_gender, voice_language
from text.localized_numbers import read_numbers
from text.normalize import read_english
from text.phoneme_spans import phonemize_spans
from text.scripts import skip_unreadable
from text.spoken import Spoken
from voicebank.voice_entry import VoiceEntry

log = logging.getLogger("polytts.engines.kokoro")

SAMPLE_RATE = 24_000
ENGLISH = ("en-us", "en-gb")
"""Languages normalized by text/normalize.py; the others' numbers, money and dates by text/localized_numbers.py."""


def choose_backend(requested: str, accelerator: str | None, mlx: bool = False) -> BackendName:
    """`auto` takes MLX on the MLX runtime, PyTorch when torch sees a GPU (CUDA or MPS), else ONNX Runtime."""
    if requested in ("torch", "onnx", "mlx"):
        return requested  # type: ignore[return-value]
    if mlx:
        return "mlx"
    return "torch" if accelerator else "onnx"


class KokoroEngine(Engine):
    name = "kokoro"
    sample_rate = SAMPLE_RATE
    # Its fastest rate (KokoroParams' bound): a quarter of the frames to decode, the same setup done (0.18 CPU-s
    # instead of 0.63 for the warm-up on one int8 thread of the 2-core machine).
    warmup_params: ClassVar[dict[str, Param]] = {"speed": 4.0}

    def __init__(
        self,
        *,
        backend: str,
        runtime: str,
        onnx_dir: Path,
        torch_model: str,
        mlx_model: str = "",
        mlx_cache_mb: int = 0,
        threads: int = 0,
        parallel_steps: int = 1,
        onnx_route: RouteSetting = "int8",
        max_packs: int = 64,
        caps: EngineCaps,
    ) -> None:
        self.requested = backend
        self.runtime = runtime
        self.onnx_dir = onnx_dir
        self.torch_model = torch_model
        self.mlx_model = mlx_model
        self.mlx_cache_mb = mlx_cache_mb
        self.threads = threads
        self.parallel_steps = parallel_steps
        self.onnx_route = onnx_route
        self.caps = caps
        self.backend: KokoroBackend | None = None
        # Deciding `auto` may need torch's view of the GPU; importing torch waits for the first load (bind first).
        mlx = uses_mlx(runtime)
        if backend != "auto" or mlx or not torch_installed():
            self.backend = self._make_backend(choose_backend(backend, None, mlx))
        self.g2p: G2P | None = None
        self._text_lock = threading.RLock()  # a blend prepares its parts within its own preparation
        """With steps at once (`steps_at_once`), the G2P (espeak-ng is not thread-safe) and the voice cache take
        one step at a time; the inferences themselves overlap."""
        self.stock = StockVoices()
        self._voices: PreparedVoices[np.ndarray] = PreparedVoices(
            self.name, max_packs, setting="POLYTTS_KOKORO_MAX_PACKS_MEM"
        )

    def _make_backend(self, name: BackendName) -> KokoroBackend:
        if name == "onnx":
            from engines.kokoro.onnx_backend import OnnxBackend

            return OnnxBackend(self.onnx_dir, self.threads, self.parallel_steps, self.onnx_route)
        if name == "mlx":
            from engines.kokoro.mlx_backend import MlxKokoroBackend

            return MlxKokoroBackend(self.mlx_model, self.mlx_cache_mb)
        from engines.kokoro.torch_backend import TorchBackend

        return TorchBackend(self.torch_model, device=torch_device(self.runtime))

    @property
    def checkpoint(self) -> str | None:
        return self.backend.checkpoint if self.backend else None

    @property
    def footprint(self) -> int:
        return self.backend.footprint if self.backend else 0

    @property
    def loaded(self) -> bool:
        return self.backend is not None and self.backend.loaded

    @property
    def steps_at_once(self) -> int:
        return self.backend.lanes if self.backend is not None else 1

    @property
    def stops_cheaply(self) -> bool:
        return self.backend is not None and self.backend.stops_cheaply

    def _chosen_backend(self) -> KokoroBackend:
        if self.backend is None:
            self.backend = self._make_backend(choose_backend(self.requested, torch_accelerator()))
            log.info("Kokoro backend: %s (requested %s)", self.backend.name, self.requested)
        return self.backend

    def preflight(self) -> None:
        self._chosen_backend().preflight()

    def load(self) -> None:
        self._chosen_backend().load()
        self.stock.load_all()  # every stock pack read and checked against its sum once, here, off the request path
        if self.g2p is None:  # chosen once, at the first load
            self.g2p = G2P(choose_english_route())
            log.info("Kokoro English G2P: %s", self.g2p.english)

    def unload(self) -> None:
        if self.backend is not None:
            self.backend.unload()
        self._voices.clear()

    def release(self) -> None:
        if self.backend is not None:
            self.backend.release()

    def builtin_voices(self) -> list[BuiltinVoice]:
        """The stock voices (on every backend, without loading), then packs that come with the weights."""
        names = dict.fromkeys([*self.stock.names(), *(self.backend.pack_names() if self.backend else [])])
        return [_builtin(name, self.name) for name in names]

    def check_language(self, language: Language) -> None:
        if language.g2p not in ("espeak", "ja", "zh"):
            raise InvalidInput(f"Kokoro cannot speak {language.name}", code="unsupported_language")

    def prepare_voice(self, voice: VoiceRef) -> np.ndarray:
        """The style pack of a voice, resolved once (blends mixed once) and kept while it is among the
        POLYTTS_KOKORO_MAX_PACKS_MEM most recently used; one pushed out is resolved again when next used."""
        with self._text_lock:
            return self._voices.get(_voice_key(voice), lambda: self._resolve(voice))

    def _resolve(self, voice: VoiceRef) -> np.ndarray:
        assert self.backend is not None
        if isinstance(voice, BuiltinVoice):
            # A model folder's own pack wins over the stock one of the same name: it belongs to those weights.
            own = voice.name in self.backend.pack_names()
            return self.backend.pack(voice.name) if own else self.stock.pack(voice.name)
        if isinstance(voice, BlendVoice):
            return mix([(self.prepare_voice(part), weight) for part, weight in voice.parts])
        if voice.engine != self.name or voice.pack_path is None:
            raise InvalidInput(
                f"voice {voice.voice_id} is a {voice.engine} voice, not a Kokoro pack", code="wrong_engine"
            )
        return read_stored_pack(voice.pack_path, voice.voice_id)

    def spoken_text(self, text: str, options: SynthesisOptions) -> Spoken:
        """Runs of a script the language does not read skipped (espeak-ng would name each letter: "Hebrew letter
        shin"), then, unless the request's `normalize` is false, English normalized (text/normalize.py) and the
        numbers, money and dates of the other languages written as their G2P reads them (text/localized_numbers.py)."""
        spoken = skip_unreadable(Spoken.of(text), options.language)
        if not bool(options.params.get("normalize", True)):
            return spoken
        if options.language.code in ENGLISH:
            return read_english(spoken)
        return read_numbers(spoken, options.language)

    word_timings = True
    takes_phonemes = True

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Iterator[np.ndarray]:
        for audio, _ in self._spoken(text, voice, options, timed=False):
            yield audio

    def stream_timed(
        self, text: str, voice: object, options: SynthesisOptions, offset: float = 0.0, written: str | None = None
    ) -> Iterator[tuple[np.ndarray, list[WordTiming]]]:
        """`stream` with word timings: each piece of audio comes with the words of `written` (the text as written
        that `text` speaks; None: `text`) that end in it, in seconds of the response's audio given `offset`, where
        this chunk's audio starts in it."""
        return self._spoken(text, voice, options, timed=True, offset=offset, written=written)

    def _spoken(
        self,
        text: str,
        voice: object,
        options: SynthesisOptions,
        timed: bool,
        offset: float = 0.0,
        written: str | None = None,
    ) -> Iterator[tuple[np.ndarray, list[WordTiming]]]:
        assert isinstance(voice, np.ndarray) and self.backend is not None and self.g2p is not None
        g2p, language, backend = self.g2p, options.language, self.backend
        clock = None
        with self._text_lock:
            # Already as spoken (`spoken_text`): never normalized twice; phoneme spans are said as they are.
            phonemes = phonemize_spans(text, lambda plain: g2p.phonemize(plain, language))
            if timed:  # words as written, each read as the model reads it ("$4.50" spans all it is spoken as)
                tokens = "".join(p for p in phonemes if p in backend.vocab)
                spans = align_words(
                    text if written is None else written,
                    tokens,
                    lambda word: g2p.phonemize(self.spoken_text(word, options).text, language),
                )
                clock = WordClock(spans, self.sample_rate, offset)
        speed = float(options.params.get("speed", 1.0))
        for window in self._token_windows(phonemes):
            audio, durations = backend.infer_timed(window, voice[len(window) - 1], speed)
            yield audio, clock.add(durations, audio) if clock is not None else []

    def _token_windows(self, phonemes: str) -> Iterator[list[int]]:
        """Token ids in windows of at most MAX_TOKENS, cut at the last space before the limit."""
        assert self.backend is not None
        vocab = self.backend.vocab
        tokens = [vocab[p] for p in phonemes if p in vocab]
        space = vocab.get(" ")
        while tokens:
            cut = len(tokens)
            if cut > MAX_TOKENS:
                spaces = [i for i, t in enumerate(tokens[:MAX_TOKENS]) if t == space]
                cut = spaces[-1] + 1 if spaces else MAX_TOKENS
            window, tokens = tokens[:cut], tokens[cut:]
            if window:
                yield window

    def describe(self) -> dict[str, object]:
        backend = self.backend
        return {
            "backend": backend.name if backend else f"{self.requested} (decided at first load)",
            "device": backend.device if backend else "undecided",
            "checkpoint": self.checkpoint,
            "loaded": self.loaded,
            "g2p": self.g2p.describe() if self.g2p else None,
            "memory": backend.memory() if backend else {},
            **(backend.describe() if backend else {}),
        }


def _builtin(name: str, engine: str) -> BuiltinVoice:
    language = voice_language(name)
    return BuiltinVoice(name, language.code if language else "unknown", engine, voice_gender(name))


def _voice_key(voice: VoiceRef) -> str:
    if isinstance(voice, VoiceEntry):
        return f"pack:{voice.voice_id}@{voice.created_at}"
    return voice.name


def build(settings: KokoroSettings, context: EngineContext) -> KokoroEngine:
    return KokoroEngine(
        backend=settings.kokoro_backend,
        runtime=context.runtime,
        onnx_dir=settings.onnx_path(context.models_dir),
        torch_model=settings.kokoro_model,
        mlx_model=settings.mlx_kokoro_model,
        mlx_cache_mb=context.mlx_cache_mb,
        threads=settings.onnx_threads,
        parallel_steps=settings.onnx_parallel_steps,
        onnx_route=settings.kokoro_onnx_route,
        max_packs=settings.kokoro_max_packs_mem,
        caps=EngineCaps(first_chunk_chars=context.first_chunk_chars, max_chunk_chars=context.chunk_chars),
    )


SPEC = EngineSpec(
    family="kokoro",
    clones_from_clip=False,
    params=KokoroParams,
    settings=KokoroSettings,
    build=build,
    packs=PackFormat(
        read=read_pack, voice_id=pack_id, stored_problem=stored_pack_problem, read_stored=read_stored_pack
    ),
    accepts_instead=(
        "a built-in voice pack by name (listed by GET /voices, e.g. 'af_heart'), a blend such as "
        "'af_bella(2)+af_sky(1)', or an uploaded 'voice_pack' file (.pt, .npy, .npz or .safetensors)"
    ),
)
