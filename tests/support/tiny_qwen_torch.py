"""A tiny, randomly initialised Qwen3-TTS (12 Hz, Base: voice cloning) for PyTorch, built at test time with no download.

`build_tiny_qwen_torch(folder)` writes the layout `qwen_tts.Qwen3TTSModel.from_pretrained(folder)` (qwen-tts-hf
0.1.1.post1) reads, the one the hub checkpoints `Qwen/Qwen3-TTS-12Hz-*-Base` have:

- `config.json` (`model_type: "qwen3_tts"`, `tts_model_type: "base"`), `model.safetensors` (talker, code predictor
  and ECAPA speaker encoder, in the package's own parameter names) and `generation_config.json` (the sampling
  defaults the real checkpoint ships, which the package reads as plain JSON);
- the text tokenizer (`tokenizer.json`, `tokenizer_config.json`: a byte-level BPE loaded as `Qwen2Tokenizer` by the
  package's `AutoProcessor`);
- `speech_tokenizer/`: the 12 Hz codec (`config.json` with `model_type: "qwen3_tts_tokenizer_12hz"`,
  `model.safetensors`, and `preprocessor_config.json` for the `EncodecFeatureExtractor` its encoder reads input
  with).

The configuration (sizes, special token ids, tokenizer) is the one the tiny MLX Qwen3-TTS uses (tests/support/tiny_mlx_qwen3.py,
which explains each choice); the config.json format is the same for both backends, only the weights' layout differs.
Rates are the real ones: 24 kHz in and out, 12.5 codec frames per second, 1920 samples per frame, 16 code groups.

Generation length: `codec_eos_token_id` is the talker's vocabulary size, an id it can never sample, so every call
runs exactly `max_new_tokens` steps, which give `max_new_tokens - 1` audio frames (the first step only prefills).

Weights: the package's own classes under `torch.manual_seed(SEED)`. The codec's codebooks, zeros at init (every clip
would encode to code 0 and decode to silence), get seeded random centroids, and its last layer a gain that makes
its output audible. The codec's encoder weights are stored
in Mimi's original layout, as in the hub checkpoints (engines/qwen_import.py renames them on load). Every build is
identical.
"""

from __future__ import annotations

import json
import pathlib

import torch
from safetensors.torch import save_file

from engines.qwen.upstream import CODEC_ENCODER_RENAMES, import_qwen_tts
from tests.support.tiny_mlx_qwen3 import (
    ENCODER_CONFIG,
    GENERATION_CONFIG,
    SPEECH_TOKENIZER_CONFIG,
    _model_config,
    _write_tokenizer,
)

SEED = 20240611
OUTPUT_LAYER = "decoder.decoder.2.conv."
OUTPUT_GAIN = 1e4
"""The codec's last convolution is scaled so that the random decoder's noise peaks near 0.3 (at init it peaks near
3e-5, -90 dBFS, which the seam joiner rightly takes for silence and trims away)."""

# Mimi (the codec's encoder in Transformers) also builds a decoder-side upsampler whose conv groups must divide its
# channels; the real codec has 512 of each. mlx-audio's encoder has no such field.
CODEC_CONFIG = {
    **SPEECH_TOKENIZER_CONFIG,
    "encoder_config": {**ENCODER_CONFIG, "upsample_groups": ENCODER_CONFIG["hidden_size"]},
}

FEATURE_EXTRACTOR_CONFIG = {
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "sampling_rate": 24000,
    "padding_side": "right",
    "padding_value": 0.0,
    "chunk_length_s": None,
    "overlap": None,
    "return_attention_mask": True,
}


def _write_json(path: pathlib.Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")


def _save(module: torch.nn.Module, path: pathlib.Path, renames: tuple[tuple[str, str], ...] = ()) -> None:
    """The module's weights as a checkpoint stores them: each `(stored, loaded)` prefix pair renamed back."""
    weights = {}
    for name, tensor in module.state_dict().items():
        for stored, loaded in renames:
            if name.startswith(loaded):
                name = stored + name[len(loaded) :]
        weights[name] = tensor.detach().clone().contiguous()  # copies: safetensors refuses shared storage
    save_file(weights, str(path))


def build_tiny_qwen_torch(folder: pathlib.Path, *, max_new_tokens: int = 16) -> pathlib.Path:
    """Write a tiny random Qwen3-TTS Base checkpoint for PyTorch into `folder` (created if needed) and return it.

    `max_new_tokens` goes into generation_config.json: the package's default when a call passes none.
    """
    import_qwen_tts()
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = _model_config(_write_tokenizer(folder), eos_reachable=False)
    _write_json(folder / "config.json", config)
    _write_json(folder / "generation_config.json", {**GENERATION_CONFIG, "max_new_tokens": int(max_new_tokens)})

    codec_folder = folder / "speech_tokenizer"
    codec_folder.mkdir(exist_ok=True)
    _write_json(codec_folder / "config.json", CODEC_CONFIG)
    _write_json(codec_folder / "preprocessor_config.json", FEATURE_EXTRACTOR_CONFIG)

    with torch.random.fork_rng(devices=[]):  # seeded weights without disturbing the caller's RNG
        torch.manual_seed(SEED)
        model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**config))
        codec = Qwen3TTSTokenizerV2Model(
            Qwen3TTSTokenizerV2Config(**{k: v for k, v in CODEC_CONFIG.items() if k != "model_type"})
        )
        with torch.no_grad():
            for name, tensor in codec.state_dict(keep_vars=True).items():
                if name.endswith((".embed_sum", ".embedding_sum")):  # encoder, decoder codebooks
                    tensor.copy_(torch.randn(tensor.shape))
                elif name.startswith(OUTPUT_LAYER):
                    tensor.mul_(OUTPUT_GAIN)
    _save(model, folder / "model.safetensors")
    _save(codec, codec_folder / "model.safetensors", CODEC_ENCODER_RENAMES)
    return folder
