"""Qwen3-TTS voice cloning, the `qwen` engine family: on PyTorch here (qwen-tts-hf on CUDA, MPS or the CPU), through
mlx-audio on the MLX runtime (engines/qwen/mlx_backend.py); streamed inside a generation.

Voices map as on the MLX runtime, so a voice id is served alike on every node:

- the clip and its transcript are the in-context reference: the model continues from the clip's codes;
- an x-vector-only voice clones from the clip's speaker embedding alone;
- a tone seed has no counterpart in Qwen3-TTS: the registry refuses one for `qwen`, and a seeded voice folder copied
  from elsewhere is served from its clip alone, as on MLX.

A voice is prepared once per model by the package's own `create_voice_clone_prompt`, on the clip cut to
`max_ref_seconds`, and persisted under `voices/<id>/prompts/<model-key>/` (`speaker.npy`, plus `ref_codes.npy` for an
in-context voice); the POLYTTS_MAX_VOICES_MEM most recently used stay in memory.

Streaming: the package generates under Transformers' `generate`, which returns when the utterance is done. A forward
hook on the talker sees each frame's codes as they are produced, so `generate` runs on a helper thread in lockstep
with the GPU thread (engines/lockstep.py): it pauses at every piece until the GPU thread asks for the next, so one of
the two runs model code at any time, and a request that ends stops its generation at the next piece. Each piece,
`stream_interval` seconds of frames, is decoded by the codec with up to 25 frames before it as left context (the
reference's codes before the first piece), the context the package's own chunked decode gives, and handed out.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.artefacts import PreparedVoices, read_clip, save_array
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
from engines.hub import HubModel, weights_revision
from engines.lockstep import lockstep
from engines.qwen.config import QwenParams, QwenSettings, check_frame_bound
from errors import InvalidInput
from text.languages import Language
from voicebank.voice_entry import VoiceEntry

log = logging.getLogger("polytts.engines.qwen")

SETTING = "POLYTTS_QWEN_MODEL"
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "speech_tokenizer/*"]
CODEC = "qwen3_tts_tokenizer_12hz"
DECODE_LEFT_CONTEXT = 25
"""Frames decoded before each piece and cut off again: the left context of the package's own chunked decode."""

SAMPLING = (
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "subtalker_temperature",
    "subtalker_top_k",
    "subtalker_top_p",
)
"""The sampling parameters a request may set (QwenParams holds them with the package's defaults)."""

LANGUAGES = {
    "en-us": "english",
    "en-gb": "english",
    "es": "spanish",
    "fr-fr": "french",
    "it": "italian",
    "pt-br": "portuguese",
    "ja": "japanese",
    "zh": "chinese",
}
"""text/languages.py's codes -> the names Qwen3-TTS takes (it also speaks German, Korean and Russian, which that
table does not list)."""


@dataclass(frozen=True)
class QwenVoice:
    prompt: Any
    """The package's `VoiceClonePromptItem`, its tensors on the model's device."""


def read_checkpoint_config(folder: Path) -> dict[str, Any]:
    """config.json of a Qwen3-TTS checkpoint this engine can clone with, else a load error saying why."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineLoadError(f"{folder} is not a Qwen3-TTS checkpoint: {path.name}: {exc} ({SETTING})") from None
    if config.get("model_type") != "qwen3_tts":
        raise EngineLoadError(
            f"{folder} is not a Qwen3-TTS checkpoint (model_type {config.get('model_type')!r}; {SETTING})"
        )
    if config.get("tts_model_type") != "base":
        raise EngineLoadError(
            f"{folder} is a Qwen3-TTS {config.get('tts_model_type')!r} checkpoint; cloning a voice needs a Base one, "
            f"e.g. Qwen/Qwen3-TTS-12Hz-1.7B-Base ({SETTING})"
        )
    if config.get("tokenizer_type") != CODEC:
        raise EngineLoadError(
            f"{folder} uses the {config.get('tokenizer_type')!r} codec; only 12 Hz checkpoints are served ({SETTING})"
        )
    return config


class QwenEngine(HubModel, Engine):
    name = "qwen"
    sample_rate = 24_000
    setting = SETTING
    hub_files = HUB_FILES

    def __init__(
        self,
        *,
        model: str,
        runtime: str,
        max_voices: int,
        max_ref_seconds: float,
        max_tokens: int,
        stream_interval: float,
        caps: EngineCaps,
    ) -> None:
        self.model_ref = model
        self.runtime = runtime
        self.max_ref_seconds = max_ref_seconds
        self.max_tokens = max_tokens
        self.stream_interval = stream_interval
        self.caps = caps
        self.device = "undecided"
        self.dtype = "undecided"
        self._model: Any = None
        self._frames_per_piece = 1
        self._decode_upsample = 1
        self._prepared: PreparedVoices[QwenVoice] = PreparedVoices(self.name, max_voices)

    # -- lifetime --------------------------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        started = time.perf_counter()
        folder = self.model_folder()
        read_checkpoint_config(folder)
        from engines.qwen.upstream import CODEC_KEY_MAPPING, import_qwen_tts

        qwen_tts = import_qwen_tts()
        import torch

        self.device = torch_device(self.runtime)
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32  # bf16: what upstream runs on CUDA
        allocated_before = torch.cuda.memory_allocated() if self.device == "cuda" else 0
        # On the CPU weights load where they are read; elsewhere `device_map` places them as they load.
        placement = {} if self.device == "cpu" else {"device_map": self.device}
        self._model = qwen_tts.Qwen3TTSModel.from_pretrained(
            str(folder), dtype=dtype, key_mapping=CODEC_KEY_MAPPING, **placement
        )
        self.dtype = str(dtype).removeprefix("torch.")
        codec = self._model.model.speech_tokenizer
        self.sample_rate = codec.get_output_sample_rate()
        self._decode_upsample = codec.get_decode_upsample_rate()
        self._frames_per_piece = max(1, round(self.stream_interval * self.sample_rate / self._decode_upsample))
        revision = weights_revision(folder, sorted(folder.glob("model*.safetensors")))
        self._checkpoint = f"qwen:{self.model_ref}@{revision[:16]}"
        if self.device == "cuda":
            torch.cuda.synchronize()
            self._footprint = torch.cuda.memory_allocated() - allocated_before
        else:
            tensors = [*self._model.model.state_dict().values(), *codec.model.state_dict().values()]
            self._footprint = sum(t.numel() * t.element_size() for t in tensors)
        log.info(
            "Qwen3-TTS loaded from %s on %s (%s) in %.2fs (%.0f MB)",
            folder,
            self.device,
            self.dtype,
            time.perf_counter() - started,
            self._footprint / 1e6,
        )

    def unload(self) -> None:
        self._model = None
        self._prepared.clear()
        free_cuda()

    def builtin_voices(self) -> list[BuiltinVoice]:
        return []

    def check_language(self, language: Language) -> None:
        if language.code not in LANGUAGES:
            raise InvalidInput(
                f"Qwen3-TTS does not speak {language.name}; it speaks {', '.join(sorted(LANGUAGES))}",
                code="unsupported_language",
            )

    def check_params(self, params: dict[str, Param]) -> None:
        check_frame_bound(params, self.max_tokens)

    # -- voices ----------------------------------------------------------------------------------------------------

    def prepare_voice(self, voice: VoiceRef) -> QwenVoice:
        entry = cloned_voice(voice, "Qwen3-TTS")
        if entry.seed_path is not None:
            log.warning("voice %s has a tone seed, which Qwen3-TTS cannot use: cloned from its clip", entry.voice_id)
        return self._prepared.get(
            prepared_key(entry),
            lambda: QwenVoice(self._clone_prompt(entry, entry.folder / "prompts" / self.model_key)),
        )

    def _clone_prompt(self, entry: VoiceEntry, folder: Path) -> Any:
        """The voice's clone prompt, from its artefacts on disk, computed and written first when missing."""
        import torch
        from qwen_tts import VoiceClonePromptItem

        in_context = not entry.x_vector_only_mode
        speaker_file, codes_file = folder / "speaker.npy", folder / "ref_codes.npy"
        if not speaker_file.is_file() or (in_context and not codes_file.is_file()):
            samples, rate = read_clip(entry.audio_path, self.max_ref_seconds)
            [item] = self._model.create_voice_clone_prompt(
                ref_audio=(samples, rate),
                ref_text=entry.ref_text if in_context else None,
                x_vector_only_mode=not in_context,
            )
            if in_context:
                save_array(codes_file, item.ref_code.cpu().numpy())
            save_array(speaker_file, item.ref_spk_embedding.float().cpu().numpy())
        device = self._model.device
        speaker = torch.from_numpy(np.load(speaker_file, allow_pickle=False))
        return VoiceClonePromptItem(
            ref_code=torch.from_numpy(np.load(codes_file, allow_pickle=False)).to(device) if in_context else None,
            ref_spk_embedding=speaker.to(device=device, dtype=self._model.model.dtype),
            x_vector_only_mode=not in_context,
            icl_mode=in_context,
            ref_text=entry.ref_text if in_context else None,
        )

    # -- generation ------------------------------------------------------------------------------------------------

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Generator[np.ndarray, None, None]:
        assert isinstance(voice, QwenVoice) and self._model is not None
        import torch

        prompt = voice.prompt
        context = prompt.ref_code[-DECODE_LEFT_CONTEXT:] if prompt.icl_mode else None
        pieces: Generator[Any, None, None] = lockstep(
            lambda emit: self._generate(text, prompt, options, emit), name="polytts-qwen-generate"
        )
        try:
            for frames in pieces:
                codes = frames if context is None else torch.cat([context, frames])
                yield self._decode(codes, skip=len(codes) - len(frames))
                context = codes[-DECODE_LEFT_CONTEXT:]
        finally:
            pieces.close()

    def _generate(self, text: str, prompt: Any, options: SynthesisOptions, emit: Callable[[Any], None]) -> None:
        """The package's `Qwen3TTSModel.generate_voice_clone` up to its whole-utterance decode, handing out the
        frames every `stream_interval` seconds as the talker produces them."""
        import torch

        wrapper, params = self._model, options.params
        input_ids = wrapper._tokenize_texts([wrapper._build_assistant_text(text)])
        ref_ids = [wrapper._tokenize_texts([wrapper._build_ref_text(prompt.ref_text)])[0] if prompt.icl_mode else None]
        max_new_tokens = int(params["max_new_tokens"]) or self.max_tokens
        sampling = wrapper._merge_generate_kwargs(
            max_new_tokens=max_new_tokens, **{name: params[name] for name in SAMPLING}
        )
        pending: list[Any] = []

        def on_talker_step(module: object, args: object, output: Any) -> None:
            codes = output.hidden_states[1]  # this step's frame: 16 codes (None on the prefill step)
            if codes is not None:
                pending.append(codes[0])
                if len(pending) >= self._frames_per_piece:
                    emit(torch.stack(pending))
                    pending.clear()

        hook = wrapper.model.talker.register_forward_hook(on_talker_step)
        try:
            wrapper.model.generate(
                input_ids=input_ids,
                ref_ids=ref_ids,
                voice_clone_prompt=wrapper._prompt_items_to_voice_clone_prompt([prompt]),
                languages=[LANGUAGES[options.language.code]],
                non_streaming_mode=bool(params["non_streaming_mode"]),
                **sampling,
            )
        finally:
            hook.remove()
        if pending:
            emit(torch.stack(pending))

    def _decode(self, codes: Any, skip: int) -> np.ndarray:
        """Audio of `codes` past the first `skip` frames, which are only context."""
        wavs, _ = self._model.model.speech_tokenizer.decode([{"audio_codes": codes}])
        return np.asarray(wavs[0][skip * self._decode_upsample :], dtype=np.float32)

    def warmup(self) -> None:
        """Nothing to warm without a voice."""

    def describe(self) -> dict[str, object]:
        memory = {"weights_bytes": self._footprint if self.loaded else 0, **torch_device_memory(self.device)}
        return {
            "backend": "torch",
            "device": self.device,
            "dtype": self.dtype,
            "checkpoint": self._checkpoint,
            "model": self.model_ref,
            "loaded": self.loaded,
            "prepared_voices": len(self._prepared),
            "stream_interval_s": self.stream_interval,
            "memory": memory,
        }


def build(settings: QwenSettings, context: EngineContext) -> Engine | None:
    """Qwen3-TTS through mlx-audio on the MLX runtime, else on PyTorch when qwen-tts-hf is installed and a model set."""
    mlx = uses_mlx(context.runtime)
    if not mlx and (not settings.qwen_model or importlib.util.find_spec("qwen_tts") is None):
        return None
    common: dict[str, Any] = {
        "max_voices": context.max_voices_mem,
        "max_ref_seconds": settings.max_ref_seconds(),
        "max_tokens": settings.qwen_max_tokens,
        "stream_interval": context.stream_interval,
        "caps": EngineCaps(0, settings.qwen_max_chars, 0, interleavable=False),
    }
    if mlx:
        from engines.qwen.mlx_backend import MlxQwenEngine

        return MlxQwenEngine(model=settings.mlx_qwen_model, cache_mb=context.mlx_cache_mb, **common)
    return QwenEngine(model=settings.qwen_model, runtime=context.runtime, **common)


SPEC = EngineSpec(family="qwen", clones_from_clip=True, params=QwenParams, settings=QwenSettings, build=build)
