"""VoxCPM2 voice cloning (`voxcpm` package), streamed in pieces as it generates.

A registered voice maps onto VoxCPM2's two prompts as engines/voxcpm/prompts.py says. Clips are trimmed to
`max_ref_seconds` and written once per voice and model under `voices/<id>/prompts/<model-key>/`; the encoded prompt
(VoxCPM's prompt cache) is built once per voice and kept in memory until the engine unloads. One model instance
holds one KV cache, so generations never interleave: the GPU thread runs one at a time.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from engines.artefacts import read_clip, usable_clip, write_atomically
from engines.base import (
    BuiltinVoice,
    Engine,
    EngineCaps,
    EngineContext,
    EngineLoadError,
    EngineSpec,
    Param,
    SynthesisOptions,
    VoiceRef,
)
from engines.cloning import cloned_voice, prepared_key
from engines.device import torch_device, torch_device_memory, uses_mlx
from engines.hub import HubModel, weights_revision
from engines.voxcpm.config import VoxCPMParams, VoxCPMSettings
from engines.voxcpm.prompts import prompt_sources
from errors import InvalidInput
from text.languages import Language

log = logging.getLogger("polytts.engines.voxcpm")

HUB_FILES = ["*.json", "*.safetensors", "*.pth", "*.bin", "*.model", "*.txt"]
SAMPLE_RATE = 48_000


@dataclass(frozen=True)
class VoxPrompt:
    """A voice mapped onto VoxCPM2's prompts, with its trimmed clips on disk."""

    key: str
    reference: Path
    prompt: Path | None
    prompt_text: str | None


class VoxCPMEngine(HubModel, Engine):
    name = "voxcpm"
    sample_rate = SAMPLE_RATE
    setting = "POLYTTS_VOXCPM_MODEL"
    hub_files = HUB_FILES

    def __init__(
        self,
        *,
        model: str,
        runtime: str,
        denoiser: Path | None,
        max_ref_seconds: float,
        max_len: int,
        caps: EngineCaps,
    ) -> None:
        self.model_ref = model
        self.runtime = runtime
        self.denoiser = denoiser
        self.max_ref_seconds = max_ref_seconds
        self.max_len = max_len
        self.caps = caps
        self.device = "undecided"
        self._voxcpm: Any = None  # voxcpm.VoxCPM (untyped)
        self._prompt_caches: dict[tuple[str, bool], dict[str, object]] = {}
        self._normalizer: Any = None  # voxcpm's TextNormalizer, built on first use

    @property
    def loaded(self) -> bool:
        return self._voxcpm is not None

    def load(self) -> None:
        started = time.perf_counter()
        folder = self.model_folder()
        if not (folder / "config.json").is_file():
            raise EngineLoadError(f"{folder} has no config.json: not a VoxCPM2 model folder (POLYTTS_VOXCPM_MODEL)")
        if self.denoiser is not None and not self.denoiser.is_dir():
            raise EngineLoadError(f"the denoiser folder {self.denoiser} does not exist (POLYTTS_VOXCPM_DENOISER)")
        from engines.voxcpm.upstream import import_voxcpm

        voxcpm = import_voxcpm()
        self.device = torch_device(self.runtime)
        # Compiling and its warm-up generation pay off only on CUDA; the denoiser loads from a local folder or not
        # at all.
        self._voxcpm = voxcpm.VoxCPM.from_pretrained(
            str(folder),
            load_denoiser=self.denoiser is not None,
            zipenhancer_model_id=str(self.denoiser) if self.denoiser else None,
            local_files_only=True,
            optimize=self.device == "cuda",
            device=self.device,
        )
        model = self._voxcpm.tts_model
        self.sample_rate = int(model.sample_rate)
        weights = sorted(folder.glob("model.safetensors")) or sorted(folder.glob("pytorch_model.bin"))
        revision = weights_revision(folder, weights)
        self._checkpoint = f"voxcpm:{self.model_ref}@{revision[:16]}"
        self._footprint = sum(p.numel() * p.element_size() for p in model.parameters())
        log.info(
            "VoxCPM2 loaded from %s on %s in %.2fs (%.0f MB, %d Hz)",
            folder,
            self.device,
            time.perf_counter() - started,
            self._footprint / 1e6,
            self.sample_rate,
        )

    def unload(self) -> None:
        self._voxcpm = None
        self._prompt_caches = {}
        gc.collect()

    def builtin_voices(self) -> list[BuiltinVoice]:
        return []

    def check_language(self, language: Language) -> None:
        """VoxCPM2 reads text as is; the language only keys the cache."""

    def check_params(self, params: dict[str, Param]) -> None:
        if params.get("denoise") and self.denoiser is None:
            raise InvalidInput(
                "denoise needs the ZipEnhancer denoiser, which this node does not load (POLYTTS_VOXCPM_DENOISER)",
                code="denoiser_unavailable",
            )

    def prepare_voice(self, voice: VoiceRef) -> VoxPrompt:
        """Map a voice onto the prompts and write its trimmed clips once per model (reused after restarts)."""
        entry = cloned_voice(voice, "VoxCPM")
        folder = entry.folder / "prompts" / self.model_key
        reference, continuation, text = prompt_sources(entry)
        trimmed = self._trimmed(reference, folder / "reference.wav")
        prompt = None
        if continuation is not None:
            prompt = trimmed if continuation == reference else self._trimmed(continuation, folder / "seed.wav")
        return VoxPrompt(prepared_key(entry), trimmed, prompt, text)

    def _trimmed(self, source: Path, target: Path) -> Path:
        """`source` as mono, cut to max_ref_seconds, written the first time it is needed."""
        if not usable_clip(target):
            samples, rate = read_clip(source, self.max_ref_seconds)
            write_atomically(target, lambda tmp: sf.write(tmp, samples, rate, format="WAV", subtype="FLOAT"))
        return target

    def _prompt_cache(self, prompt: VoxPrompt, denoise: bool) -> dict[str, object]:
        """VoxCPM's encoded prompt for a voice, built once per voice (and denoise setting) while loaded."""
        key = (prompt.key, denoise)
        cache = self._prompt_caches.get(key)
        if cache is None:
            assert self._voxcpm is not None
            reference, continuation = prompt.reference, prompt.prompt
            if denoise:
                reference = self._denoised(reference)
                continuation = self._denoised(continuation) if continuation else None
            cache = self._voxcpm.tts_model.build_prompt_cache(
                prompt_text=prompt.prompt_text if continuation else None,
                prompt_wav_path=str(continuation) if continuation else None,
                reference_wav_path=str(reference),
            )
            self._prompt_caches[key] = cache
        return cache

    def _denoised(self, clip: Path) -> Path:
        target = clip.with_name(clip.stem + ".denoised.wav")
        if not usable_clip(target):
            denoiser = self._voxcpm.denoiser
            write_atomically(target, lambda tmp: denoiser.enhance(str(clip), output_path=tmp))
        return target

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Iterator[np.ndarray]:
        assert isinstance(voice, VoxPrompt) and self._voxcpm is not None
        params = options.params
        cache = self._prompt_cache(voice, bool(params["denoise"]))
        if params["normalize"]:
            text = self._normalize(text)
        pieces = self._voxcpm.tts_model._generate_with_prompt_cache(
            target_text=text,
            prompt_cache=cache,
            max_len=self.max_len,
            inference_timesteps=int(params["inference_timesteps"]),
            cfg_value=float(params["cfg_value"]),
            retry_badcase=False,  # a retry would repeat audio already streamed
            streaming=True,
        )
        try:
            for wav, _, _ in pieces:
                yield wav.squeeze(0).float().cpu().numpy()
        finally:
            pieces.close()

    def _normalize(self, text: str) -> str:
        if self._normalizer is None:
            from voxcpm.utils.text_normalize import TextNormalizer

            self._normalizer = TextNormalizer()
        return self._normalizer.normalize(text)

    def warmup(self) -> None:
        """Nothing to warm without a voice; VoxCPM compiles and warms up itself on CUDA."""

    def describe(self) -> dict[str, object]:
        memory = {"weights_bytes": self._footprint if self.loaded else 0, **torch_device_memory(self.device)}
        return {
            "backend": "torch",
            "device": self.device,
            "checkpoint": self._checkpoint,
            "model": self.model_ref,
            "loaded": self.loaded,
            "denoiser": str(self.denoiser) if self.denoiser else None,
            "prepared_voices": len(self._prompt_caches),
            "memory": memory,
        }


def build(settings: VoxCPMSettings, context: EngineContext) -> Engine | None:
    """VoxCPM2 through mlx-audio on the MLX runtime, else through `voxcpm` on PyTorch when it is installed."""
    # VoxCPM streams inside a generation, so its first chunk needs no shorter cap.
    caps = EngineCaps(0, settings.voxcpm_max_chars, settings.voxcpm_max_sentences, interleavable=False)
    if uses_mlx(context.runtime):
        from engines.voxcpm.mlx_backend import MlxVoxCPMEngine

        return MlxVoxCPMEngine(
            model=settings.mlx_voxcpm_model,
            cache_mb=context.mlx_cache_mb,
            max_voices=context.max_voices_mem,
            max_ref_seconds=settings.voxcpm_max_ref_seconds,
            max_len=settings.voxcpm_max_len,
            caps=caps,
        )
    if importlib.util.find_spec("voxcpm") is None:
        return None
    return VoxCPMEngine(
        model=settings.voxcpm_model,
        runtime=context.runtime,
        denoiser=settings.voxcpm_denoiser,
        max_ref_seconds=settings.voxcpm_max_ref_seconds,
        max_len=settings.voxcpm_max_len,
        caps=caps,
    )


SPEC = EngineSpec(
    family="voxcpm", clones_from_clip=True, params=VoxCPMParams, settings=VoxCPMSettings, build=build, takes_seed=True
)
