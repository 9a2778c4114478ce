"""A tiny, randomly initialised VoxCPM2 checkpoint built at test time, with no download.

The folder has the layout `VoxCPM.from_pretrained(folder, ...)` reads: `config.json` (architecture "voxcpm2"),
`model.safetensors`, `audiovae.safetensors`, `tokenizer.json` and `tokenizer_config.json`. The weights come from the
package's own classes, seeded, so every build is identical. The audio VAE keeps the real model's rates: prompt and
reference audio are encoded at 16 kHz, output is 48 kHz, and each generated patch decodes to 7680 samples (160 ms).

Generation length: the stop head is zeroed, so the model never predicts "stop" and every call runs for
`min(max_len, 6 * target_tokens + 10)` patches (the package's own bound; the tokenizer is one token per character plus
a leading "▁"). A streaming call yields one 7680-sample chunk per patch.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import torch
from safetensors.torch import save_file

from engines.voxcpm.upstream import import_voxcpm
from tests.support.tiny_tokenizer import write_tokenizer

SEED = 1234

LM_CONFIG: dict[str, Any] = {
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "rms_norm_eps": 1e-5,
    "rope_scaling": {
        "type": "longrope",
        "long_factor": [1.0] * 16,  # head_dim / 2 = (64 / 2) / 2
        "short_factor": [1.0] * 16,
        "original_max_position_embeddings": 2048,
    },
    "vocab_size": 0,  # set from the tokenizer
    "use_mup": False,
    "scale_emb": 1.0,
    "dim_model_base": 64,
    "scale_depth": 1.0,
    "rope_theta": 10000.0,
}

AUDIO_VAE_CONFIG: dict[str, Any] = {
    "encoder_dim": 8,
    "encoder_rates": [2, 5, 8, 8],  # 640 samples per latent frame at 16 kHz, as in VoxCPM2
    "latent_dim": 16,
    "decoder_dim": 128,
    "decoder_rates": [8, 6, 5, 2, 2, 2],  # 1920 samples per latent frame at 48 kHz, as in VoxCPM2
    "depthwise": True,
    "sample_rate": 16000,
    "out_sample_rate": 48000,
    "use_noise_block": False,
    "sr_bin_boundaries": [20000, 30000, 40000],
    "cond_type": "scale_bias",
    "cond_dim": 16,
    "cond_out_layer": False,
}

MODEL_CONFIG: dict[str, Any] = {
    "architecture": "voxcpm2",
    "lm_config": LM_CONFIG,
    "patch_size": 4,
    "feat_dim": AUDIO_VAE_CONFIG["latent_dim"],
    "residual_lm_num_layers": 1,
    "residual_lm_no_rope": False,
    "scalar_quantization_latent_dim": 32,
    "scalar_quantization_scale": 9,
    "encoder_config": {"hidden_dim": 64, "ffn_dim": 128, "num_heads": 2, "num_layers": 1},
    "dit_config": {
        "hidden_dim": 64,
        "ffn_dim": 128,
        "num_heads": 2,
        "num_layers": 1,
        "dit_mean_mode": False,
        "cfm_config": {"sigma_min": 1e-6, "solver": "euler", "t_scheduler": "log-norm", "inference_cfg_rate": 1.0},
    },
    "audio_vae_config": AUDIO_VAE_CONFIG,
    "max_length": 2048,
    "device": "cpu",
    "dtype": "float32",
}


def build_tiny_voxcpm(folder: pathlib.Path) -> pathlib.Path:
    """Write a tiny random VoxCPM2 checkpoint into `folder` (created if needed) and return it."""
    import_voxcpm()
    from transformers import LlamaTokenizerFast
    from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
    from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_tokenizer(folder, max_length=MODEL_CONFIG["max_length"], cjk=True)
    config = {**MODEL_CONFIG, "lm_config": {**LM_CONFIG, "vocab_size": vocab_size}}
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    tokenizer = LlamaTokenizerFast.from_pretrained(str(folder))
    with torch.random.fork_rng(devices=[]):  # seeded weights without disturbing the caller's RNG
        torch.manual_seed(SEED)
        audio_vae = AudioVAEV2(config=AudioVAEConfigV2.model_validate(AUDIO_VAE_CONFIG))
        model = VoxCPM2Model(VoxCPMConfig.model_validate(config), tokenizer, audio_vae, device="cpu")
    with torch.no_grad():
        model.stop_head.weight.zero_()  # tied logits: argmax is "continue", so length is bounded by max_len only

    weights = {
        name: tensor.detach().contiguous()
        for name, tensor in model.state_dict().items()
        if not name.startswith("audio_vae.")
    }
    save_file(weights, str(folder / "model.safetensors"))
    vae_weights = {name: tensor.detach().contiguous() for name, tensor in audio_vae.state_dict().items()}
    save_file(vae_weights, str(folder / "audiovae.safetensors"))
    return folder
