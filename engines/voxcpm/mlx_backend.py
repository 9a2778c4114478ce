"""VoxCPM2 on MLX (mlx-audio), for Apple Silicon nodes: the same voices and prompt mapping as on PyTorch
(engines/voxcpm/prompts.py).

mlx-audio 0.6.2's VoxCPM2 `generate` neither streams inside a generation nor takes precomputed reference latents,
so this engine streams per generation chunk (the same caps as on CUDA) and prepares what `generate` can take: the
reference and continuation clips, mono, trimmed, at the model's rate. The latents are encoded inside `generate`;
copying its private loop to feed cached ones would tie the service to the package's internals.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engines.base import EngineCaps, Param, SynthesisOptions, VoiceRef
from engines.cloning import cloned_voice, prepared_key
from engines.mlx_base import MlxEngine, to_numpy
from engines.voxcpm.prompts import prompt_sources
from errors import InvalidInput
from text.languages import Language


@dataclass(frozen=True)
class MlxVoxPrompt:
    reference: np.ndarray
    prompt: np.ndarray | None
    prompt_text: str | None


class MlxVoxCPMEngine(MlxEngine[MlxVoxPrompt]):
    name = "voxcpm"
    sample_rate = 48_000

    def __init__(
        self, *, model: str, cache_mb: int, max_voices: int, max_ref_seconds: float, max_len: int, caps: EngineCaps
    ) -> None:
        super().__init__(
            model=model,
            setting="POLYTTS_MLX_VOXCPM_MODEL",
            cache_mb=cache_mb,
            max_voices=max_voices,
            max_ref_seconds=max_ref_seconds,
            caps=caps,
        )
        self.max_len = max_len

    def check_language(self, language: Language) -> None:
        """VoxCPM2 reads text as is; the language only keys the cache."""

    def check_params(self, params: dict[str, Param]) -> None:
        unsupported = [name for name in ("normalize", "denoise") if params.get(name)]
        if unsupported:
            raise InvalidInput(
                f"{', '.join(unsupported)} is not available for VoxCPM on the MLX runtime", code="unsupported_parameter"
            )

    def prepare_voice(self, voice: VoiceRef) -> MlxVoxPrompt:
        entry = cloned_voice(voice, "VoxCPM")
        reference, continuation, text = prompt_sources(entry)

        def prepare(folder: Path) -> MlxVoxPrompt:
            ref = self.resampled_clip(reference, folder / "reference.npy")
            prompt = None
            if continuation is not None:
                prompt = ref if continuation == reference else self.resampled_clip(continuation, folder / "seed.npy")
            return MlxVoxPrompt(ref, prompt, text)

        return self.prepared(prepared_key(entry), entry.folder, prepare)

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Iterator[np.ndarray]:
        import mlx.core as mx

        assert isinstance(voice, MlxVoxPrompt) and self.model is not None
        self.owner.check()
        prompt = voice.prompt
        results = self.model.generate(
            text,
            max_tokens=self.max_len,
            ref_audio=mx.array(voice.reference),
            prompt_audio=mx.array(prompt) if prompt is not None else None,
            prompt_text=voice.prompt_text if prompt is not None else None,
            inference_timesteps=int(options.params["inference_timesteps"]),
            cfg_value=float(options.params["cfg_value"]),
        )
        for result in results:
            yield to_numpy(result.audio)  # evaluated here, on the thread that owns the model's streams
