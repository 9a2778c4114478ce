"""Qwen3-TTS on MLX (mlx-audio): voice cloning from a registered clip and its transcript, streamed inside a
generation every `stream_interval` seconds of audio.

A voice is prepared once: its clip as mono float32 at 24 kHz (trimmed) and, when it has a transcript, the clip's
reference codes from the speech tokenizer. Both are persisted under `voices/<id>/prompts/<model-key>/`. mlx-audio's
`generate` takes the clip itself, not the codes, but it looks its reference codes up in the model's own prompt
cache (keyed by transcript and clip) before encoding; the engine fills that cache from the persisted codes and
removes entries it no longer holds, so nothing is encoded twice and no model method is replaced. x-vector-only
voices clone from the speaker embedding alone (no transcript); a tone seed has no counterpart in Qwen3-TTS.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engines.artefacts import load_array, save_array
from engines.base import EngineCaps, Param, SynthesisOptions, VoiceRef
from engines.cloning import cloned_voice, prepared_key
from engines.mlx_base import MlxEngine, to_numpy
from engines.qwen.config import QwenParams, check_frame_bound
from errors import InvalidInput
from text.languages import Language

MLX_FIXED = ("subtalker_temperature", "subtalker_top_k", "subtalker_top_p", "non_streaming_mode")
"""Qwen parameters mlx-audio's generate does not take."""


@dataclass(frozen=True)
class QwenVoice:
    reference: object
    """The clip as an mx.array at 24 kHz: the very array `generate` fingerprints for its prompt cache."""
    ref_text: str | None
    cache_key: tuple[object, ...] | None


class MlxQwenEngine(MlxEngine[QwenVoice]):
    name = "qwen"
    sample_rate = 24_000

    def __init__(
        self,
        *,
        model: str,
        cache_mb: int,
        max_voices: int,
        max_ref_seconds: float,
        max_tokens: int,
        stream_interval: float,
        caps: EngineCaps,
    ) -> None:
        super().__init__(
            model=model,
            setting="POLYTTS_MLX_QWEN_MODEL",
            cache_mb=cache_mb,
            max_voices=max_voices,
            max_ref_seconds=max_ref_seconds,
            caps=caps,
        )
        self.max_tokens = max_tokens
        self.stream_interval = stream_interval

    def check_language(self, language: Language) -> None:
        """Qwen3-TTS detects the language itself (`lang_code="auto"`)."""

    def prepare_voice(self, voice: VoiceRef) -> QwenVoice:
        entry = cloned_voice(voice, "Qwen3-TTS")
        ref_text = None if entry.x_vector_only_mode else entry.ref_text

        def prepare(folder: Path) -> QwenVoice:
            import mlx.core as mx

            reference = mx.array(self.resampled_clip(entry.audio_path, folder / "reference.npy"))
            if ref_text is None:
                return QwenVoice(reference, None, None)
            codes_file = folder / "ref_codes.npy"
            stored = load_array(codes_file)
            if stored is not None:
                codes = mx.array(stored)
            else:
                codes = self.model.speech_tokenizer.encode(reference[None, None, :])
                save_array(codes_file, np.asarray(codes))
            key = (ref_text, (reference.size, float(reference.sum())))
            self.model._icl_cache[key] = (codes, None)
            return QwenVoice(reference, ref_text, key)

        return self.prepared(prepared_key(entry), entry.folder, prepare)

    def dropped(self, prepared: QwenVoice) -> None:
        if prepared.cache_key is not None and self.model is not None:
            self.model._icl_cache.pop(prepared.cache_key, None)

    def check_params(self, params: dict[str, Param]) -> None:
        """mlx-audio's Qwen3-TTS samples its residual codebooks with fixed settings and always streams the text in;
        a request that asks otherwise is refused rather than ignored."""
        defaults = QwenParams()
        fixed = [name for name in MLX_FIXED if params[name] != getattr(defaults, name)]
        if fixed:
            raise InvalidInput(
                f"{', '.join(fixed)}: not available for Qwen3-TTS on the MLX runtime", code="unsupported_parameter"
            )
        check_frame_bound(params, self.max_tokens)

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Iterator[np.ndarray]:
        assert isinstance(voice, QwenVoice) and self.model is not None
        self.owner.check()
        params = options.params
        results = self.model.generate(
            text=text,
            ref_audio=voice.reference,
            ref_text=voice.ref_text,
            max_tokens=int(params["max_new_tokens"]) or self.max_tokens,
            temperature=float(params["temperature"]),
            top_k=int(params["top_k"]),
            top_p=float(params["top_p"]),
            repetition_penalty=float(params["repetition_penalty"]),
            lang_code="auto",
            stream=True,
            streaming_interval=self.stream_interval,
        )
        for result in results:
            yield to_numpy(result.audio)  # evaluated here, on the thread that owns the model's streams
