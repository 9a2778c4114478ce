"""The one small interface every engine implements; the ModelManager owns each engine's lifetime.

All methods except the cheap descriptive ones (`builtin_voices`, `describe`, `check_language`, `spoken_text`) run
on the single GPU thread; the generations of an engine whose `steps_at_once` is above 1 run on its lanes, several at
once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, TypeVar, cast

import numpy as np
from pydantic import BaseModel, ConfigDict
from pydantic_settings import BaseSettings, SettingsConfigDict

from audio.word_timings import WordTiming
from errors import Unavailable
from text.languages import Language
from text.spoken import Spoken
from voicebank.voice_entry import VoiceEntry

ENV_PREFIX = "POLYTTS_"


class EngineLoadError(Unavailable):
    """The engine cannot load on this host; the message says why and what to do (a 503 when a request hits it)."""

    code = "engine_failed"


@dataclass(frozen=True)
class EngineCaps:
    first_chunk_chars: int
    """Cap on the first text chunk, kept short so the first audio comes early."""
    max_chunk_chars: int
    """Cap on the text one generation may take."""
    max_sentences: int = 0
    """Cap on sentences per generation, 0 meaning unlimited."""
    # first_chunk_chars 0: the first chunk has the same cap as the others (engines that stream inside a generation)
    interleavable: bool = True
    """Whether generations of different requests may alternate on one instance."""


@dataclass(frozen=True)
class BuiltinVoice:
    name: str
    language: str
    engine: str
    gender: str | None = None

    def public(self) -> dict[str, object]:
        return {
            "voice_id": self.name,
            "engine": self.engine,
            "language": self.language,
            "gender": self.gender,
            "builtin": True,
        }


Param = float | int | bool | str


@dataclass(frozen=True)
class SynthesisOptions:
    language: Language
    params: dict[str, Param] = field(default_factory=dict)
    """The engine family's generation parameters (`EngineSpec.params`), defaults filled in."""

    def cache_params(self) -> dict[str, object]:
        """Every parameter that changes the audio: part of the cache key."""
        return {"language": self.language.code, **self.params}


@dataclass(frozen=True)
class BlendVoice:
    """A weighted mix of voices of one engine, e.g. `af_bella(2)+af_sky(1)`; weights sum to 1."""

    name: str
    """The canonical spelling of the formula."""
    engine: str
    parts: tuple[tuple[BuiltinVoice | VoiceEntry, float], ...]


VoiceRef = BuiltinVoice | VoiceEntry | BlendVoice
"""A voice a request resolved to: a built-in pack by name, a registered voice, or a blend."""


class EngineParams(BaseModel):
    """The per-request generation parameters of one engine family: each field with its range and default.

    The speech request model is built from every family's fields, so a range is declared here and nowhere else.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSettings(BaseSettings):
    """The `POLYTTS_*` settings one engine family reads; `settings.Settings` is built from every family's."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", validate_default=True)


@dataclass(frozen=True)
class EngineContext:
    """What an engine's build reads of the service's own settings; the rest of them no engine sees."""

    runtime: str
    """POLYTTS_RUNTIME: `auto`, `cuda`, `mps`, `cpu` or `mlx`."""
    models_dir: Path
    """POLYTTS_MODELS_DIR: where run-time weights are assembled."""
    max_voices_mem: int
    """POLYTTS_MAX_VOICES_MEM: prepared voices kept in memory per engine."""
    mlx_cache_mb: int
    """POLYTTS_MLX_CACHE_MB: the MLX allocator's cache limit."""
    stream_interval: float
    """POLYTTS_STREAM_INTERVAL: seconds of audio per piece, for engines that stream inside a generation."""
    first_chunk_chars: int
    """POLYTTS_FIRST_CHUNK_CHARS: cap on a request's first text chunk."""
    chunk_chars: int
    """POLYTTS_CHUNK_CHARS: cap on every later text chunk."""


FamilySettings = TypeVar("FamilySettings", bound=EngineSettings)


@dataclass(frozen=True)
class PackFormat:
    """What a voice pack is to a family whose voices are style packs (`EngineSpec.packs`): the voice bank reads,
    names and checks uploaded and stored packs through it, knowing nothing of what a pack holds. A pack is read into
    one float array, stored as a plain .npy file, and its voice id hashes its values, so the same pack has the same id
    whatever file format carried it."""

    read: Callable[[bytes, str], np.ndarray]
    """An uploaded pack (its bytes and file name) parsed and checked without running pickled code; a refusal is a
    422 `InvalidInput` with a `pack_*` code."""
    voice_id: Callable[[np.ndarray], str]
    """The voice id of a pack as `read` returns it: a hash of its values."""
    stored_problem: Callable[[Path], str | None]
    """Why a stored pack file cannot hold a pack, judged without reading its values (cheap enough for every voice at
    start-up); None when it looks whole."""
    read_stored: Callable[[Path, str], np.ndarray]
    """A stored pack read back in full and checked against its voice id: a damaged one is the voice's
    `voice_damaged` error."""


@dataclass(frozen=True)
class EngineSpec(Generic[FamilySettings]):
    """What the wiring needs to know of one engine family, declared by the family's own module.

    The server builds its engines from `engines.ENGINE_SPECS`; the registry checks registrations against them (a
    node stores voices of families it cannot run, so voices stay portable).
    """

    family: str
    clones_from_clip: bool
    """Whether a voice can be registered from a reference clip."""
    params: type[EngineParams]
    settings: type[FamilySettings]
    """The family's own `POLYTTS_*` settings; the service's `Settings` is composed from every family's."""
    build: Callable[[FamilySettings, EngineContext], Engine | None]
    """The engine this node runs for the family, or None when it cannot (its package is not installed)."""
    packs: PackFormat | None = None
    """For families whose voices are style packs: what a pack is (a voice can then be registered from an uploaded
    `voice_pack`, and the family's voices blend)."""
    accepts_instead: str = ""
    """For families that cannot clone: what they take as a voice instead (shown in the 422)."""
    takes_seed: bool = False
    """Whether a cloned voice may carry a tone seed (`seed_audio` and `seed_text`)."""
    transcript_optional: bool = False
    """Whether a clip may be registered without its transcript outside x-vector-only mode (CosyVoice's zero-shot
    prompt takes an empty one)."""

    @property
    def accepts_packs(self) -> bool:
        """Whether a voice can be registered from an uploaded style pack (`voice_pack`), and voices blend."""
        return self.packs is not None

    def param_defaults(self) -> dict[str, Param]:
        return self.params().model_dump()

    def own_settings(self, settings: EngineSettings) -> FamilySettings:
        """The family's share of `settings` (the service's composed `Settings`, already validated), as the family's
        own class: an engine sees its family's fields and nothing else."""
        values = {name: getattr(settings, name) for name in self.settings.model_fields}
        # Not validated again (and not read from the environment again, as validating a BaseSettings would). The
        # cast: pydantic's mypy plugin types model_construct on a type variable as the variable's bound.
        return cast(FamilySettings, self.settings.model_construct(**values))


class Engine(ABC):
    name: str
    """The family this engine serves (`EngineSpec.family`)."""
    sample_rate: int
    caps: EngineCaps
    warmup_params: ClassVar[dict[str, Param]] = {}
    """The warm-up generation's parameters: whatever makes it cheapest, as it runs only to do the lazy setup once."""

    def check_params(self, params: dict[str, Param]) -> None:
        """Raise InvalidInput when this node cannot honour a parameter (e.g. a denoiser that is not installed)."""

    @property
    @abstractmethod
    def checkpoint(self) -> str | None:
        """What is (or was last) loaded, with its checksum: part of every cache key. None while it is not known
        (before the first load), when nothing may be cached."""

    @property
    def footprint(self) -> int:
        """Bytes of (device) memory the loaded model takes, for the manager's status."""
        return 0

    @property
    def steps_at_once(self) -> int:
        """Steps of different requests this engine may run at the same time, each on a lane of the GPU thread
        (gpu/gpu_thread.py): only an engine on the CPU that is safe to call from several threads says more than 1."""
        return 1

    @property
    def stops_cheaply(self) -> bool:
        """Whether a step stopped mid-run (`engines.step_stop`) leaves the engine as fast as before: only then does the
        scheduler stop a step for an arrival, to say it again later (a cancelled request's step is stopped wherever
        the engine can stop it)."""
        return False

    def preflight(self) -> None:
        """Raise EngineLoadError when the weights cannot be had now (not local, not cached, hub out of reach). Checked
        before another engine is evicted for this one, so a working engine is never traded for one that cannot load."""

    @abstractmethod
    def load(self) -> None:
        """Load the weights; raise EngineLoadError with a clear reason when this host cannot."""

    @abstractmethod
    def unload(self) -> None:
        """Drop the weights and every prepared voice, releasing device memory."""

    @abstractmethod
    def builtin_voices(self) -> list[BuiltinVoice]:
        """Voices this engine ships with, usable by name; readable without loading."""

    @abstractmethod
    def check_language(self, language: Language) -> None:
        """Raise InvalidInput when this engine cannot speak `language`."""

    @abstractmethod
    def prepare_voice(self, voice: VoiceRef) -> object:
        """Per-voice work done once and cached by the engine until unload; returns the handle `stream` takes."""

    def spoken_text(self, text: str, options: SynthesisOptions) -> Spoken:
        """What this engine says for `text` (as written, whitespace normalized) under `options`: the text it reads once
        it has rewritten it (numbers read out, what it cannot read skipped), traced back to the text as written. The
        service limits and chunks this text; `stream` then takes chunks of it and speaks them as they are. Cheap, and
        called off the GPU thread. By default the text is spoken as written."""
        return Spoken.of(text)

    @abstractmethod
    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Iterator[np.ndarray]:
        """Float32 mono audio for one text chunk (of `spoken_text`'s text), in pieces as they are produced."""

    takes_phonemes = False
    """Whether its G2P reads phoneme spans inside a text (text.phoneme_spans): lexicons' phoneme entries, inline
    phonemes and SSML `<phoneme>`; an engine that reads text only is given aliases, and phonemes are a 422."""

    word_timings = False
    """Whether `stream_timed` can tell when each word is spoken."""

    def stream_timed(
        self, text: str, voice: object, options: SynthesisOptions, offset: float = 0.0, written: str | None = None
    ) -> Iterator[tuple[np.ndarray, list[WordTiming]]]:
        """`stream` with the words that end in each piece, in seconds of the response's audio (`offset`: where this
        chunk starts in it); the words are those of `written`, the text as written that `text` speaks (None: `text`
        itself). Only engines with `word_timings`."""
        raise NotImplementedError(f"{self.name} cannot time words")

    def release(self) -> None:
        """Called on the GPU thread when a request ends, however it ends: give back what it held (MLX: the
        allocator's cache)."""

    def warmup(self) -> None:
        """One short generation after the first load, so the first request does not pay for lazy setup."""
        voices = self.builtin_voices()
        if voices:
            from text.languages import resolve_language

            handle = self.prepare_voice(voices[0])
            for _ in self.stream("Ready.", handle, SynthesisOptions(resolve_language(None), dict(self.warmup_params))):
                pass

    @abstractmethod
    def describe(self) -> dict[str, object]:
        """What `/health` shows about this engine: backend, device, checkpoint."""
