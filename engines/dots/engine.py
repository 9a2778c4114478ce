"""dots.tts voice cloning, the `dots` engine family, on PyTorch through the `dots.tts` package's own runtime
(`DotsTtsRuntime.from_pretrained`), streamed inside a generation.

A registered voice maps onto the package's two cloning modes:

- the clip and its transcript: continuation (the model continues from the clip's encoded audio, which consumes the
  transcript, so a voice without one cannot take this path);
- an x-vector-only voice: the clip's speaker embedding (CAM++) alone;
- a tone seed has no counterpart in dots.tts: the registry refuses one for `dots`, and a seeded voice folder copied
  from elsewhere is served from its clip alone.

A voice's clip is cut to `max_ref_seconds` once per model and written under `voices/<id>/prompts/<model-key>/`;
the package encodes it (speaker embedding, prompt latents) and keeps the encoding in memory until the model goes.

Streaming: `generate_stream` yields audio patch by patch as the model decodes them (the package's own cadence);
closing it stops the generation at the next patch. With `double_streaming` the package's `DoubleStreamingSession`
speaks instead, fed one text token at a time, the contract of the streaming-TTS checkpoint (dots.tts-mf-2steps-stts).

Memory: the longest reference sets the peak (a continuation voice's whole clip is encoded, and the prompt's
patches fill the generation's buffers), so on CUDA the footprint is measured over the load and one generation
against a synthetic reference of `max_ref_seconds`, then raised if a later generation peaks higher. On the CPU there
is no device allocator to measure: the footprint is the weights' bytes.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import tempfile
import time
import warnings
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from engines.artefacts import PreparedVoices, read_clip, usable_clip, write_atomically
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
from engines.device import free_cuda, torch_device, torch_device_memory, uses_mlx
from engines.dots.config import DotsParams, DotsSettings
from engines.hub import HubModel, weights_revision
from errors import InvalidInput
from text.languages import Language, resolve_language
from voicebank.voice_entry import VoiceEntry

log = logging.getLogger("polytts.engines.dots")

SETTING = "POLYTTS_DOTS_MODEL"
HUB_FILES = ["*.json", "*.safetensors", "*.pt", "*.txt"]
REQUIRED_FILES = (
    "config.json",
    "llm_config.json",
    "latent_stats.pt",
    "model.safetensors",
    "vocoder.safetensors",
    "speaker_encoder.safetensors",
)
"""What the package's from_pretrained reads (besides the tokenizer)."""
SAMPLING = ("num_steps", "guidance_scale")
PROBE_TEXT = "This generation measures the memory one with the longest reference takes."


@dataclass(frozen=True)
class DotsVoice:
    reference: Path
    """The clip, cut to max_ref_seconds."""
    prompt_text: str | None
    """Its transcript on the continuation path; None for an x-vector-only voice."""


def read_checkpoint_config(folder: Path) -> dict[str, Any]:
    """config.json of a dots.tts TTS checkpoint with every file the package reads, else a load error saying why."""
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise EngineLoadError(f"{folder} is not a dots.tts checkpoint: it lacks {', '.join(missing)} ({SETTING})")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineLoadError(f"{folder} is not a dots.tts checkpoint: config.json: {exc} ({SETTING})") from None
    if not isinstance(config, dict) or config.get("model_type", "dots_tts") != "dots_tts":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise EngineLoadError(f"{folder} is not a dots.tts TTS checkpoint (model_type {kind!r}; {SETTING})")
    return config


def synthetic_clip(folder: Path, seconds: float) -> Path:
    """A clip of `seconds` that no silence trimming shortens (a tone with a little noise), for the probes."""
    rate = 16_000
    t = np.arange(int(seconds * rate)) / rate
    samples = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.01 * np.random.default_rng(0).standard_normal(t.size)
    path = folder / "probe.wav"
    sf.write(path, samples.astype(np.float32), rate)
    return path


class DotsEngine(HubModel, Engine):
    name = "dots"
    sample_rate = 48_000
    setting = SETTING
    hub_files = HUB_FILES

    def __init__(
        self,
        *,
        model: str,
        runtime: str,
        max_voices: int,
        max_ref_seconds: float,
        max_patches: int,
        double_streaming: bool,
        optimize: bool,
        caps: EngineCaps,
    ) -> None:
        self.model_ref = model
        self.runtime = runtime
        self.max_ref_seconds = max_ref_seconds
        self.max_patches = max_patches
        self.double_streaming = double_streaming
        self.optimize = optimize
        self.caps = caps
        self.device = "undecided"
        self.precision = "undecided"
        self._runtime: Any = None  # dots_tts's DotsTtsRuntimeDoubleStreaming (untyped)
        self._weights = 0
        self._reserved_base = 0
        self._probing = False
        self._fixed_sampling: dict[str, Param] | None = None
        self._prepared: PreparedVoices[DotsVoice] = PreparedVoices(self.name, max_voices)

    # -- lifetime --------------------------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._runtime is not None

    def load(self) -> None:
        started = time.perf_counter()
        folder = self.model_folder()
        self._check_reference_fits(read_checkpoint_config(folder))
        from engines.dots.upstream import import_dots_tts

        dots = import_dots_tts()
        import torch

        cuda = torch.cuda.is_available()
        if torch_device(self.runtime) == "cpu" and cuda:
            raise EngineLoadError(
                "dots.tts runs on the GPU whenever torch sees one, and POLYTTS_RUNTIME asks for the CPU: set "
                "POLYTTS_RUNTIME to cuda or auto (or hide the GPU with CUDA_VISIBLE_DEVICES)"
            )
        self.device = "cuda" if cuda else "cpu"  # the package's own choice; it has no MPS path
        self.precision = "bfloat16" if cuda else "float32"  # bf16: the package's default; it refuses it on the CPU
        self._reserved_base = torch.cuda.memory_reserved() if cuda else 0
        threads = torch.get_num_threads()
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="CUDA is not available")  # known: the CPU was chosen above
                self._runtime = dots.DotsTtsRuntimeDoubleStreaming.from_pretrained(
                    str(folder),
                    precision=self.precision,
                    optimize=self.optimize and cuda,
                    max_generate_length=self.max_patches,
                )
        finally:
            torch.set_num_threads(threads)  # the package sets one thread on the CPU, for the whole process
        model = self._runtime.model
        self.sample_rate = int(self._runtime.sample_rate)
        sampling = model.config.sampling
        self._fixed_sampling = (
            None if sampling is None else {"num_steps": sampling.num_steps, "guidance_scale": sampling.guidance_scale}
        )
        revision = weights_revision(folder, [folder / "model.safetensors"])
        self._checkpoint = f"dots:{self.model_ref}@{revision[:16]}"
        tensors = [*model.parameters(), *model.buffers()]
        self._weights = sum(t.numel() * t.element_size() for t in tensors)
        self._footprint = self._weights
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            self._probe(self.max_ref_seconds, continuation=True)
            self._footprint = self._peak_reserved()
        log.info(
            "dots.tts loaded from %s on %s (%s) in %.2fs (%.0f MB of weights, footprint %.0f MB)",
            folder,
            self.device,
            self.precision,
            time.perf_counter() - started,
            self._weights / 1e6,
            self._footprint / 1e6,
        )

    def _check_reference_fits(self, config: dict[str, Any]) -> None:
        """A continuation voice's reference takes patches of the generation's budget: refuse settings that leave
        less than a quarter of it to the speech (read from config.json, before anything loads)."""
        vocoder = config.get("vocoder", {})
        samples_per_patch = int(config.get("patch_size", 1)) * math.prod(vocoder.get("downsample_rates", [1]))
        reference = math.ceil(self.max_ref_seconds * int(vocoder.get("sample_rate", 1)) / samples_per_patch)
        if reference + 1 > self.max_patches * 3 // 4:
            raise EngineLoadError(
                f"POLYTTS_DOTS_MAX_REF_SECONDS {self.max_ref_seconds:g} is {reference} patches of this checkpoint, "
                f"too many for POLYTTS_DOTS_MAX_PATCHES {self.max_patches}: lower the first or raise the second"
            )

    def _probe(self, seconds: float, *, continuation: bool) -> None:
        """One generation of a piece or two against a synthetic reference of `seconds`."""
        self._probing = True
        try:
            with tempfile.TemporaryDirectory() as scratch:
                voice = DotsVoice(synthetic_clip(Path(scratch), seconds), PROBE_TEXT if continuation else None)
                options = SynthesisOptions(resolve_language("en"), DotsParams().model_dump())
                pieces = self.stream(PROBE_TEXT, voice, options)
                for _, _ in zip(range(2), pieces, strict=False):
                    pass
                pieces.close()
        finally:
            self._probing = False

    def _peak_reserved(self) -> int:
        import torch

        return int(torch.cuda.max_memory_reserved()) - self._reserved_base

    def unload(self) -> None:
        self._runtime = None
        self._prepared.clear()
        free_cuda()

    def warmup(self) -> None:
        """On the CPU, one short x-vector generation pays the package's lazy setup (librosa's first call takes
        seconds); on CUDA the load's probe has done it."""
        if self.device == "cpu":
            self._probe(1.0, continuation=False)

    def builtin_voices(self) -> list[BuiltinVoice]:
        return []

    def check_language(self, language: Language) -> None:
        """dots.tts speaks every language the service names (it was evaluated on 24); the language tags the text."""

    def check_params(self, params: dict[str, Param]) -> None:
        fixed = self._fixed_sampling
        if fixed is None:
            return
        defaults = DotsParams().model_dump()
        changed = [name for name in SAMPLING if params[name] not in (defaults[name], fixed[name])]
        if changed:
            raise InvalidInput(
                f"{', '.join(changed)}: this dots.tts checkpoint ({self.model_ref}) samples with a fixed "
                f"num_steps={fixed['num_steps']} and guidance_scale={fixed['guidance_scale']:g}; leave them out",
                code="unsupported_parameter",
            )

    # -- voices ----------------------------------------------------------------------------------------------------

    def prepare_voice(self, voice: VoiceRef) -> DotsVoice:
        entry = cloned_voice(voice, "dots.tts")
        if entry.seed_path is not None:
            log.warning("voice %s has a tone seed, which dots.tts cannot use: cloned from its clip", entry.voice_id)
        return self._prepared.get(prepared_key(entry), lambda: self._prepare(entry))

    def _prepare(self, entry: VoiceEntry) -> DotsVoice:
        target = entry.folder / "prompts" / self.model_key / "reference.wav"
        if not usable_clip(target):
            samples, rate = read_clip(entry.audio_path, self.max_ref_seconds)
            write_atomically(target, lambda tmp: sf.write(tmp, samples, rate, format="WAV", subtype="FLOAT"))
        text = None if entry.x_vector_only_mode else (entry.ref_text or None)
        return DotsVoice(target, text)

    # -- speech ----------------------------------------------------------------------------------------------------

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Generator[np.ndarray, None, None]:
        assert isinstance(voice, DotsVoice) and self._runtime is not None
        self.check_params(options.params)  # a request planned before the first load is checked here
        params = options.params
        # None: the checkpoint's own (a fixed-step checkpoint refuses anything else).
        sampling = {name: None if self._fixed_sampling else params[name] for name in SAMPLING}
        speaker_scale = float(params["speaker_scale"])
        if self.double_streaming:
            pieces = self._double_streamed(text, voice, sampling, speaker_scale)
        else:
            pieces = self._runtime.generate_stream(
                text=text,
                prompt_audio_path=str(voice.reference),
                prompt_text=voice.prompt_text,
                language=options.language.code.split("-")[0],
                speaker_scale=speaker_scale,
                **sampling,
            )
        try:
            for piece in pieces:
                yield piece.detach().float().cpu().reshape(-1).numpy()
        finally:
            pieces.close()
            if self.device == "cuda" and not self._probing:
                self._raise_footprint()

    def _double_streamed(
        self, text: str, voice: DotsVoice, sampling: dict[str, Any], speaker_scale: float
    ) -> Generator[Any, None, None]:
        """The package's double-streaming session, fed `text` one token at a time, then told the text has ended."""
        session = self._runtime.start_double_streaming(
            prompt_audio_path=str(voice.reference),
            prompt_text=voice.prompt_text,
            speaker_scale=speaker_scale,
            **sampling,
        )
        for token in self._runtime.model.tokenizer.encode(text, add_special_tokens=False):
            piece = session.push_text_token(token)
            if piece is not None:
                yield piece
        try:
            yield from session.finish_text()
        except RuntimeError:
            if not _out_of_patches(session):
                raise
            log.warning("dots.tts used all %d patches (POLYTTS_DOTS_MAX_PATCHES): speech cut there", self.max_patches)

    def _raise_footprint(self) -> None:
        peak = self._peak_reserved()
        if peak > self._footprint:
            log.warning(
                "dots.tts peaked at %.0f MB, above its measured footprint of %.0f MB: footprint raised",
                peak / 1e6,
                self._footprint / 1e6,
            )
            self._footprint = peak

    def describe(self) -> dict[str, object]:
        memory: dict[str, object] = {
            "weights_bytes": self._weights if self.loaded else 0,
            "footprint_bytes": self._footprint if self.loaded else 0,
            "footprint_measured": "cuda peak reserved" if self.device == "cuda" else "weights only (CPU)",
            **torch_device_memory(self.device),
        }
        return {
            "backend": "torch",
            "device": self.device,
            "dtype": self.precision,
            "checkpoint": self._checkpoint,
            "model": self.model_ref,
            "loaded": self.loaded,
            "double_streaming": self.double_streaming,
            "optimize": self.optimize,
            "fixed_sampling": self._fixed_sampling,
            "max_ref_seconds": self.max_ref_seconds,
            "max_patches": self.max_patches,
            "prepared_voices": len(self._prepared),
            "memory": memory,
        }


def _out_of_patches(session: Any) -> bool:
    """Whether a double-streaming session that raised had used up its generation's budget without reaching its end
    of speech: its patches, or (a patch sooner, as the session counts them) its decoder's buffer. The session says so
    only by raising a RuntimeError."""
    state, core = session._state, session.model.core
    full = state.fm_seq_len + core.latent_patch_size + core.hidden_patch_size > state.fm_capacity
    return bool(full or session._decoded_patch_count >= session.max_generate_length)


def build(settings: DotsSettings, context: EngineContext) -> Engine | None:
    """dots.tts on PyTorch when the `dots.tts` package is installed and a model set; none on the MLX runtime (there is
    no MLX port in mlx-audio), where its voices are stored and refused."""
    if uses_mlx(context.runtime) or not settings.dots_model or importlib.util.find_spec("dots_tts") is None:
        return None
    return DotsEngine(
        model=settings.dots_model,
        runtime=context.runtime,
        max_voices=context.max_voices_mem,
        max_ref_seconds=settings.dots_max_ref_seconds,
        max_patches=settings.dots_max_patches,
        double_streaming=settings.dots_double_streaming,
        optimize=settings.dots_optimize,
        caps=EngineCaps(0, settings.dots_max_chars, 0, interleavable=False),
    )


SPEC = EngineSpec(family="dots", clones_from_clip=True, params=DotsParams, settings=DotsSettings, build=build)
