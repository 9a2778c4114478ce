"""CosyVoice 2 voice cloning, the `cosyvoice` engine family: FunAudioLLM's model code (engines/cosyvoice/upstream.py)
on PyTorch (CUDA, MPS or the CPU), streamed by the model's own chunked inference.

A registered voice maps onto CosyVoice 2's prompts as upstream's `inference_*` methods build them:

- zero-shot (the default): the LLM continues the clip's speech tokens after its transcript, and the flow takes the
  clip's mel features and speaker embedding. An empty transcript is passed through as it is (upstream tolerates it);
- cross-lingual (an x-vector-only voice, or a request's `cross_lingual`): the LLM gets no prompt at all; the flow still
  takes the clip, so the timbre is the clip's while the text may be in any language the model speaks;
- instruct (a request's `instruct`, upstream's `inference_instruct2`): the LLM's prompt is the instruction, ended by
  `<|endofprompt|>`, instead of the clip's speech; the flow takes the clip;
- a tone seed has no counterpart: the registry refuses one for `cosyvoice`, and a seeded folder from elsewhere is
  served from its clip.

A voice is prepared once per model from its clip cut to `max_ref_seconds`, by the frontend's own extractors: speech
tokens (`speech_tokenizer_v2.onnx`, 25 a second), mel features (two frames a token) and the CAM++ speaker embedding,
persisted under `voices/<id>/prompts/<model-key>/` (`speech_tokens.npy`, `speech_feat.npy`, `embedding.npy`); the
POLYTTS_MAX_VOICES_MEM most recently used stay in memory.

Streaming is upstream's `CosyVoice2Model.tts(stream=True)` schedule run on the GPU thread itself: the LLM's token
generator is pulled one token at a time, and each time 25 new tokens (plus the flow's 3 look-ahead; the first piece
also pads the prompt to a whole chunk) are there, the package's `token2wav` turns them into audio with the flow's
chunk-causal attention and HiFT's carried-over cache. Upstream runs the LLM on a thread of its own that nothing
stops; here closing the stream closes the generator, so the LLM stops at the next token.

Memory: each piece is decoded from the reference's tokens and every token generated so far, so the last piece of the
longest generation (`max_tokens` after a reference of `max_ref_seconds`) is the peak. On CUDA the footprint is the
peak reserved over the load and that decode on synthetic tokens (`probe`), raised if a generation peaks higher; on
the CPU and MPS it is the weights' bytes.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.artefacts import PreparedVoices, load_array, read_clip, save_array
from engines.base import (
    BuiltinVoice,
    Engine,
    EngineCaps,
    EngineContext,
    EngineLoadError,
    EngineSpec,
    SynthesisOptions,
    VoiceRef,
)
from engines.cloning import cloned_voice, prepared_key
from engines.cosyvoice.config import CosyVoiceParams, CosyVoiceSettings
from engines.device import free_cuda, torch_device, torch_device_memory
from engines.hub import HubModel, weights_revision
from errors import InvalidInput
from text.languages import Language
from text.normalize import read_english
from text.spoken import Spoken
from voicebank.voice_entry import VoiceEntry

log = logging.getLogger("polytts.engines.cosyvoice")

SETTING = "POLYTTS_COSYVOICE_MODEL"
HUB_FILES = [
    "cosyvoice2.yaml",
    "llm.pt",
    "flow.pt",
    "hift.pt",
    "campplus.onnx",
    "speech_tokenizer_v2.onnx",
    "CosyVoice-BlankEN/*",
]
"""What a CosyVoice 2 hub snapshot needs here (not its TensorRT, JIT and vLLM exports)."""
LANGUAGES = ("en-us", "en-gb", "zh", "ja")
"""text/languages.py's codes CosyVoice 2 speaks (it also speaks Korean and Chinese dialects, which that table lacks)."""
ENGLISH = ("en-us", "en-gb")
END_OF_PROMPT = "<|endofprompt|>"
"""Ends an instruction in the LLM's prompt (upstream's `frontend_instruct2`)."""
PROMPT_RATE = 16_000
SPEECH_TOKEN_RATE = 25
"""Speech tokens a second (speech_tokenizer_v2)."""
"""The speech tokenizer's and the speaker encoder's rate; the mel features are taken at the model's."""


@dataclass(frozen=True)
class CosyVoicePrompt:
    """A voice as CosyVoice 2's prompts take it, tensors on the model's device."""

    transcript: str
    speech_tokens: Any
    """(1, tokens) int32: the clip's speech tokens."""
    speech_feat: Any
    """(1, 2 * tokens, 80): the clip's mel features."""
    embedding: Any
    """(1, 192): the clip's speaker embedding."""
    cross_lingual: bool
    """An x-vector-only voice: the LLM never continues its clip."""


class CosyVoiceEngine(HubModel, Engine):
    name = "cosyvoice"
    sample_rate = 24_000
    setting = SETTING
    hub_files = HUB_FILES

    def __init__(
        self, *, model: str, runtime: str, max_voices: int, max_ref_seconds: float, max_tokens: int, caps: EngineCaps
    ) -> None:
        self.model_ref = model
        self.runtime = runtime
        self.max_ref_seconds = max_ref_seconds
        self.max_tokens = max_tokens
        self.caps = caps
        self.device = "undecided"
        self._cosyvoice: Any = None  # engines.cosyvoice.upstream.CosyVoice2
        self._weights = 0
        self._reserved_base = 0
        self._prepared: PreparedVoices[CosyVoicePrompt] = PreparedVoices(self.name, max_voices)

    # -- lifetime --------------------------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._cosyvoice is not None

    def load(self) -> None:
        started = time.perf_counter()
        folder = self.model_folder()
        if (folder / "cosyvoice3.yaml").is_file() or (folder / "cosyvoice.yaml").is_file():
            raise EngineLoadError(
                f"{folder} is a CosyVoice {'3' if (folder / 'cosyvoice3.yaml').is_file() else '1'} checkpoint; "
                f"this node serves CosyVoice 2 (e.g. FunAudioLLM/CosyVoice2-0.5B), the model code its package "
                f"cosyvoice-minicpmo carries ({SETTING})"
            )
        import torch

        from engines.cosyvoice.upstream import load_cosyvoice2

        self.device = torch_device(self.runtime)
        if self.device == "cuda":
            self._reserved_base = torch.cuda.memory_reserved()
            torch.cuda.reset_peak_memory_stats()
        self._cosyvoice = load_cosyvoice2(folder, self.device, SETTING)
        self.sample_rate = self._cosyvoice.sample_rate
        revision = weights_revision(folder, [folder / "llm.pt"])
        self._checkpoint = f"cosyvoice:{self.model_ref}@{revision[:16]}"
        model = self._cosyvoice.model
        # parameters() counts the backbone's tied embeddings once (state_dict would count them twice).
        tensors = [t for part in (model.llm, model.flow, model.hift) for t in (*part.parameters(), *part.buffers())]
        self._weights = self._footprint = sum(t.numel() * t.element_size() for t in tensors)
        if self.device == "cuda":
            self.probe()
            self._footprint = self._peak_reserved()
        log.info(
            "CosyVoice 2 loaded from %s on %s in %.2fs (%.0f MB of weights, footprint %.0f MB)",
            folder,
            self.device,
            time.perf_counter() - started,
            self._weights / 1e6,
            self._footprint / 1e6,
        )

    def probe(self) -> None:
        """The decode that peaks: the flow and HiFT over a reference of `max_ref_seconds` and a generation of
        `max_tokens` at once, as the last piece of the longest generation is decoded (on synthetic tokens; the LLM's
        own cache is a few kB a token)."""
        import torch

        model = self._cosyvoice.model
        reference = round(self.max_ref_seconds * SPEECH_TOKEN_RATE)
        tokens = torch.randint(0, model.flow.vocab_size, (1, reference + self.max_tokens), device=model.device)
        session = f"polytts-probe-{uuid.uuid4().hex}"
        model.hift_cache_dict[session] = None
        try:
            model.token2wav(
                token=tokens[:, reference:],
                prompt_token=tokens[:, :reference],
                prompt_feat=torch.zeros(1, 2 * reference, model.flow.output_size, device=model.device),
                embedding=torch.zeros(1, model.flow.spk_embed_affine_layer.in_features, device=model.device),
                token_offset=0,
                uuid=session,
                finalize=True,
            )
        finally:
            model.hift_cache_dict.pop(session, None)

    def _peak_reserved(self) -> int:
        import torch

        return int(torch.cuda.max_memory_reserved()) - self._reserved_base

    def unload(self) -> None:
        self._cosyvoice = None
        self._prepared.clear()
        free_cuda()

    def builtin_voices(self) -> list[BuiltinVoice]:
        return []

    def check_language(self, language: Language) -> None:
        if language.code not in LANGUAGES:
            raise InvalidInput(
                f"CosyVoice does not speak {language.name}; it speaks {', '.join(LANGUAGES)}",
                code="unsupported_language",
            )

    def spoken_text(self, text: str, options: SynthesisOptions) -> Spoken:
        """English read out by the service's normalizer (as Kokoro's), unless the request's `normalize` is false;
        Chinese is normalized by CosyVoice's own frontend as it is spoken."""
        spoken = Spoken.of(text)
        if bool(options.params["normalize"]) and options.language.code in ENGLISH:
            spoken = read_english(spoken)
        return spoken

    # -- voices ----------------------------------------------------------------------------------------------------

    def prepare_voice(self, voice: VoiceRef) -> CosyVoicePrompt:
        entry = cloned_voice(voice, "CosyVoice")
        if entry.seed_path is not None:
            log.warning("voice %s has a tone seed, which CosyVoice cannot use: cloned from its clip", entry.voice_id)
        return self._prepared.get(prepared_key(entry), lambda: self._prompt(entry))

    def _prompt(self, entry: VoiceEntry) -> CosyVoicePrompt:
        """The voice's prompts, from its artefacts on disk, computed and written first when missing or damaged."""
        import torch

        folder = entry.folder / "prompts" / self.model_key
        files = {name: folder / f"{name}.npy" for name in ("speech_tokens", "speech_feat", "embedding")}
        stored = {name: load_array(path) for name, path in files.items()}
        arrays = {name: array for name, array in stored.items() if array is not None}
        if len(arrays) < len(files):
            arrays = self._extract(entry.audio_path)
            for name, array in arrays.items():
                save_array(files[name], array)
        device = self._cosyvoice.model.device
        tensors = {name: torch.from_numpy(array).to(device) for name, array in arrays.items()}
        return CosyVoicePrompt(
            transcript=entry.ref_text,
            speech_tokens=tensors["speech_tokens"].to(torch.int32),
            speech_feat=tensors["speech_feat"].float(),
            embedding=tensors["embedding"].float(),
            cross_lingual=entry.x_vector_only_mode,
        )

    def _extract(self, clip: Path) -> dict[str, np.ndarray]:
        """What upstream's `frontend_zero_shot` takes from a prompt clip, by its own extractors: speech tokens and the
        speaker embedding from the clip at 16 kHz, mel features at the model's rate, cut to two frames a token."""
        import librosa
        import torch

        samples, rate = read_clip(clip, self.max_ref_seconds)
        frontend = self._cosyvoice.frontend
        at_16k = torch.from_numpy(librosa.resample(samples, orig_sr=rate, target_sr=PROMPT_RATE)).unsqueeze(0)
        at_model = torch.from_numpy(librosa.resample(samples, orig_sr=rate, target_sr=self.sample_rate)).unsqueeze(0)
        tokens, _ = frontend._extract_speech_token(at_16k)
        feat, _ = frontend._extract_speech_feat(at_model)
        embedding = frontend._extract_spk_embedding(at_16k)
        length = min(feat.shape[1] // 2, tokens.shape[1])  # upstream: CosyVoice 2 keeps feat == 2 * tokens
        return {
            "speech_tokens": tokens[:, :length].cpu().numpy().astype(np.int32),
            "speech_feat": feat[:, : 2 * length].float().cpu().numpy(),
            "embedding": embedding.float().cpu().numpy(),
        }

    # -- generation ------------------------------------------------------------------------------------------------

    def stream(self, text: str, voice: object, options: SynthesisOptions) -> Generator[np.ndarray, None, None]:
        assert isinstance(voice, CosyVoicePrompt) and self._cosyvoice is not None
        import torch
        from cosyvoice.utils.common import ras_sampling

        model, params = self._cosyvoice.model, options.params
        text_tokens = self._tokens(self._frontend_text(text, params))
        instruct = str(params["instruct"]).strip()
        if instruct:
            prompt_text, prompt_speech = self._tokens(instruct + END_OF_PROMPT), voice.speech_tokens[:, :0]
        elif voice.cross_lingual or params["cross_lingual"]:
            prompt_text, prompt_speech = self._tokens(""), voice.speech_tokens[:, :0]
        else:
            prompt_text, prompt_speech = (
                self._tokens(self._frontend_text(voice.transcript, params)),
                voice.speech_tokens,
            )
        model.llm.sampling = functools.partial(
            ras_sampling,
            top_p=float(params["top_p"]),
            top_k=int(params["top_k"]),
            win_size=int(params["repetition_window"]),
            tau_r=float(params["repetition_ratio"]),
        )
        tokens: Generator[int, None, None] = model.llm.inference(
            text=text_tokens,
            text_len=_length(text_tokens),
            prompt_text=prompt_text,
            prompt_text_len=_length(prompt_text),
            prompt_speech_token=prompt_speech,
            prompt_speech_token_len=_length(prompt_speech),
            embedding=voice.embedding,
        )
        session = f"polytts-{uuid.uuid4().hex}"
        model.hift_cache_dict[session] = None
        hop, lookahead = model.token_hop_len, model.flow.pre_lookahead_len
        prompt_tokens = voice.speech_tokens.shape[1]
        first_hop = hop + math.ceil(prompt_tokens / hop) * hop - prompt_tokens  # the prompt padded to whole chunks

        def audio(upto: int | None, offset: int, finalize: bool) -> np.ndarray:
            speech = model.token2wav(
                token=torch.tensor([generated[:upto]], dtype=torch.int64),
                prompt_token=voice.speech_tokens,
                prompt_feat=voice.speech_feat,
                embedding=voice.embedding,
                token_offset=offset,
                uuid=session,
                stream=not finalize,
                finalize=finalize,
            )
            return np.asarray(speech.squeeze(0).float().cpu().numpy(), dtype=np.float32)

        generated: list[int] = []
        offset = 0
        try:
            for token in tokens:
                generated.append(token)
                this_hop = first_hop if offset == 0 else hop
                if len(generated) - offset >= this_hop + lookahead:
                    piece = audio(offset + this_hop + lookahead, offset, finalize=False)
                    offset += this_hop
                    yield piece
                if len(generated) == self.max_tokens:
                    log.warning(
                        "CosyVoice reached %d speech tokens (POLYTTS_COSYVOICE_MAX_TOKENS): cut", self.max_tokens
                    )
                    break
            yield audio(None, offset, finalize=True)
            if self.device == "cuda":
                self._raise_footprint()
        finally:
            tokens.close()
            model.hift_cache_dict.pop(session, None)

    def _raise_footprint(self) -> None:
        peak = self._peak_reserved()
        if peak > self._footprint:
            log.warning(
                "CosyVoice peaked at %.0f MB, above its measured footprint of %.0f MB: footprint raised",
                peak / 1e6,
                self._footprint / 1e6,
            )
            self._footprint = peak

    def _frontend_text(self, text: str, params: dict[str, Any]) -> str:
        """Chinese text through CosyVoice's own text frontend (wetext's grammar, its punctuation rules), when asked."""
        from cosyvoice.utils.frontend_utils import contains_chinese

        if params["normalize"] and text and contains_chinese(text):
            return str(self._cosyvoice.frontend.text_normalize(text, split=False))
        return text

    def _tokens(self, text: str) -> Any:
        tokens, _ = self._cosyvoice.frontend._extract_text_token(text)
        return tokens

    def warmup(self) -> None:
        """Nothing to warm without a voice."""

    def describe(self) -> dict[str, object]:
        memory: dict[str, object] = {
            "weights_bytes": self._weights if self.loaded else 0,
            "footprint_bytes": self._footprint if self.loaded else 0,
            "footprint_measured": "cuda peak reserved" if self.device == "cuda" else "weights only",
            **torch_device_memory(self.device),
        }
        return {
            "backend": "torch",
            "device": self.device,
            "checkpoint": self._checkpoint,
            "model": self.model_ref,
            "loaded": self.loaded,
            "prepared_voices": len(self._prepared),
            "memory": memory,
        }


def _length(tokens: Any) -> Any:
    """A token tensor's length as the model's calls take it: a fresh (1,) int32 tensor (the LLM adds to it in
    place)."""
    import torch

    return torch.tensor([tokens.shape[1]], dtype=torch.int32, device=tokens.device)


def build(settings: CosyVoiceSettings, context: EngineContext) -> Engine | None:
    """CosyVoice 2 on PyTorch when cosyvoice-minicpmo is installed and a model is set (there is no MLX port: on the
    MLX runtime it runs on torch's MPS device)."""
    if not settings.cosyvoice_model or importlib.util.find_spec("cosyvoice") is None:
        return None
    # CosyVoice streams inside a generation, so its first chunk needs no shorter cap.
    caps = EngineCaps(0, settings.cosyvoice_max_chars, 0, interleavable=False)
    return CosyVoiceEngine(
        model=settings.cosyvoice_model,
        runtime=context.runtime,
        max_voices=context.max_voices_mem,
        max_ref_seconds=settings.cosyvoice_max_ref_seconds,
        max_tokens=settings.cosyvoice_max_tokens,
        caps=caps,
    )


SPEC = EngineSpec(
    family="cosyvoice",
    clones_from_clip=True,
    params=CosyVoiceParams,
    settings=CosyVoiceSettings,
    build=build,
    transcript_optional=True,
)
