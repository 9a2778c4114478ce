"""A tiny, randomly initialised dots.tts checkpoint built at test time, with no download.

`build_tiny_dots(folder)` builds the package's own `DotsTtsModel` (dots.tts 0.3.1) from a small configuration and
writes it with the package's own `save_pretrained`, in the layout `DotsTtsRuntime.from_pretrained(folder)` reads, the
one the hub checkpoints `dots-studio/dots.tts-*` have: `config.json`, `llm_config.json` (a Qwen2 config),
`latent_stats.pt`, `model.safetensors` (LLM, patch encoder, DiT), `vocoder.safetensors` (the AudioVAE),
`speaker_encoder.safetensors` (CAM++, whose architecture is fixed: it is most of the 8M parameters) and the
tokenizer files (tests/support/tiny_tokenizer.py's character-level tokenizer with dots.tts's special tokens).

Rates: audio in and out at 24 kHz (the real checkpoints use 48 kHz; 24 kHz keeps the speaker encoder's own
resampling to 16 kHz in play); 480 samples per latent frame and 4 frames per patch, so one patch is 1920 samples
(80 ms). Generation length: the EOS head is zeroed, so the model never stops by itself and a generation fills every
audio span the runtime schedules (its `max_generate_length`, less the prompt's patches on the continuation path).
The DiT's output layer starts at zero, as the package initialises it, so each patch is the flow's starting noise,
which the random vocoder turns into audible noise. Every build is identical.
"""

from __future__ import annotations

import pathlib
import tempfile
from typing import Any

import torch

from engines.dots.upstream import import_dots_tts
from tests.support.tiny_tokenizer import write_tokenizer

SEED = 20260601
SAMPLE_RATE = 24_000
HOP = 480
PATCH = 4
SAMPLES_PER_PATCH = HOP * PATCH
LATENT_DIM = 8

SPECIAL_TOKENS = [
    "<|audio_comp_start|>",
    "<|audio_comp_span|>",
    "<|audio_comp_end|>",
    "<|audio_gen_start|>",
    "<|audio_gen_span|>",
    "<|audio_gen_end|>",
    "<|text_cond_end|>",
]
"""The tokens dots.tts's schedules are made of (dots_tts/utils/tokenizer.py), added to the tiny tokenizer."""

BLOCK: dict[str, Any] = {"num_layers": 1, "num_heads": 2, "hidden_size": 32, "ffn_hidden_size": 64}

MODEL_CONFIG: dict[str, Any] = {
    "latent_dim": LATENT_DIM,
    "patch_size": PATCH,
    "PatchEncoder": {**BLOCK, "input_dim": LATENT_DIM},
    "DiT": BLOCK,
    "vocoder": {
        "sample_rate": SAMPLE_RATE,
        "downsample_rates": [2, 4, 5, 12],
        "downsample_channels": [12, 16, 16, 16, 16],  # the first is the encoder's fixed base width
        "upsample_rates": [12, 5, 4, 2],
        "upsample_kernel_sizes": [24, 10, 8, 4],
        "upsample_initial_channel": 32,
        "resblock": "1",
        "resblock_kernel_sizes": [3],
        "resblock_dilation_sizes": [[1, 3, 5]],
        "latent_dim": LATENT_DIM,
        "mi_num_layers": 1,
        "causal": True,  # streaming decodes patch by patch: the package refuses a non-causal vocoder
    },
    "campplus_embedding_size": 32,
}

LLM_CONFIG: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}


def build_tiny_dots(folder: pathlib.Path, *, streaming: dict[str, Any] | None = None) -> pathlib.Path:
    """Write a tiny random dots.tts checkpoint into `folder` (created if needed) and return it. `streaming`: the
    config's `streaming` section (the interleave pattern of a double-streaming checkpoint), if any."""
    import_dots_tts()
    from dots_tts.models.dots_tts.config import ModelConfig
    from dots_tts.models.dots_tts.model import DotsTtsModel
    from transformers import AutoTokenizer, Qwen2Config

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder, max_length=4096, cjk=True)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    config = ModelConfig.model_validate({**MODEL_CONFIG, **({"streaming": streaming} if streaming else {})})
    llm_config = Qwen2Config(**LLM_CONFIG, vocab_size=len(tokenizer))
    with tempfile.TemporaryDirectory() as scratch:  # save_pretrained copies the stats into `folder`
        stats = pathlib.Path(scratch) / "latent_stats.pt"
        torch.save({"mean": torch.zeros(LATENT_DIM), "var": torch.ones(LATENT_DIM)}, stats)
        with torch.random.fork_rng(devices=[]):  # seeded weights without disturbing the caller's RNG
            torch.manual_seed(SEED)
            model = DotsTtsModel(config, tokenizer, latent_stats_path=stats, llm_config=llm_config)
            with torch.no_grad():
                # The DiT's modulations and output start at zero, which would make every patch the flow's starting
                # noise whatever the steps, the guidance or the voice: random values make them count.
                for weight in model.core.velocity_field_predictor.parameters():
                    if weight.dim() >= 2 and not weight.any():
                        weight.normal_(0.0, 0.05)
                model.core.eos_proj[-1].weight.zero_()  # "stop" and "go on" equally likely: never over the threshold
                model.core.eos_proj[-1].bias.zero_()
        model.save_pretrained(folder)
    return folder
