"""A tiny, randomly initialised VoxCPM2 checkpoint for mlx-audio, built at test time with no download.

mlx-audio 0.6.2 has two VoxCPM packages: `mlx_audio.tts.models.voxcpm` (VoxCPM 0.5B / 1.5) and
`mlx_audio.tts.models.voxcpm2` (VoxCPM2, 16 kHz encode / 48 kHz decode audio VAE). This builds the latter:
`config.json` says `"architecture": "voxcpm2"`, as the upstream config does; `load_model` takes the model type from
`model_type` or else `architecture`, and `MODEL_REMAPPING` sends "voxcpm2" to `mlx_audio.tts.models.voxcpm2`
("voxcpm" and "voxcpm1.5" go to the older package). There is deliberately no `model_type` key: the tokenizer load
(`AutoTokenizer.from_pretrained(folder)`) also reads config.json and warns about an unknown model type.

Layout written, and why:

- `config.json`: the upstream VoxCPM2 config shape (`lm_config` with `rope_scaling`, `encoder_config`, `dit_config`
  with `cfm_config`, `audio_vae_config`, ...) with tiny dims. The audio VAE keeps the real rates: encoder
  `[2, 5, 8, 8]` at 16 kHz (640 samples per latent frame), decoder `[8, 6, 5, 2, 2, 2]` at 48 kHz (1920 samples per
  latent frame), `patch_size` 4, so each generated patch is 7680 samples (160 ms) of 48 kHz audio.
- `model.safetensors`: ONE file holding every parameter of the package's own MLX `Model`, keys exactly as
  `tree_flatten(model.parameters())` names them, the audio VAE included under `audio_vae.` in MLX layout.
  `load_model` globs every `*.safetensors` in the folder into one dict, so a separate `audiovae.safetensors` with
  PyTorch-style keys (the layout of the PyTorch `voxcpm` package) would reach `load_weights(strict=True)` un-prefixed
  and fail; and `Model.sanitize`'s own `audiovae.safetensors` fallback never runs because `ModelArgs.from_dict` drops
  `model_path`. `sanitize` leaves MLX-layout keys unchanged (checked by `check_tiny_mlx_voxcpm_keys`).
- `tokenizer.json` + `tokenizer_config.json`: `post_load_hook` runs `AutoTokenizer.from_pretrained(folder)`. The
  tokenizer is built with the `tokenizers` library: one token per ASCII character ("▁" for a space, Llama
  Metaspace style), byte fallback so any text (Chinese included) encodes, and ids 101-104 reserved for the special
  tokens the model hard-codes (`<|audio_start|>`, `<|audio_end|>`, `<|ref_audio_start|>`, `<|ref_audio_end|>`).

Weights come from `mx.random.seed(SEED)`, so every build is identical. `stop_head.weight` is zeroed: the stop logits
are always equal, argmax is "continue", and a call always yields exactly `max_tokens` patches (`max_tokens * 7680`
samples, plus 8 trailing samples from the decoder; the package's default `max_tokens` is 2000, so always pass a small
one). `generate()` yields one result whose `.audio` (the VAE decode) is still lazy: evaluate it (`mx.eval`,
`np.array`) on the thread that called `generate()`, since MLX streams are thread-local.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, cast

from tests.support.mlx_trees import flat
from tests.support.tiny_tokenizer import write_tokenizer

SEED = 1234

LM_CONFIG: dict[str, Any] = {
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "max_position_embeddings": 4096,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": {
        "type": "longrope",
        "long_factor": [1.0] * 16,  # head_dim / 2 = (64 / 2) / 2
        "short_factor": [1.0] * 16,
        "original_max_position_embeddings": 4096,
    },
    "vocab_size": 0,  # set from the tokenizer
    "use_mup": False,
    "scale_emb": 12,
    "dim_model_base": 256,
    "scale_depth": 1.4,
}

AUDIO_VAE_CONFIG: dict[str, Any] = {
    "encoder_dim": 8,
    "encoder_rates": [2, 5, 8, 8],  # 640 samples per latent frame at 16 kHz, as in VoxCPM2
    "latent_dim": 16,
    "decoder_dim": 64,  # the smallest that survives 6 channel halvings; decode cost dominates a call
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
    "architecture": "voxcpm2",  # no "model_type": transformers' AutoTokenizer would warn about an unknown type
    "lm_config": LM_CONFIG,
    "patch_size": 4,
    "feat_dim": AUDIO_VAE_CONFIG["latent_dim"],
    "residual_lm_num_layers": 1,
    "residual_lm_no_rope": True,  # as in VoxCPM2
    "scalar_quantization_latent_dim": 32,
    "scalar_quantization_scale": 9,
    "encoder_config": {"hidden_dim": 64, "ffn_dim": 128, "num_heads": 2, "num_layers": 1},
    "dit_config": {
        "hidden_dim": 64,
        "ffn_dim": 128,
        "num_heads": 2,
        "num_layers": 1,
        "dit_mean_mode": False,
        "cfm_config": {"sigma_min": 1e-6, "solver": "euler", "t_scheduler": "log-norm", "inference_cfg_rate": 2.0},
    },
    "audio_vae_config": AUDIO_VAE_CONFIG,
    "max_length": 4096,
}

SAMPLE_RATE = AUDIO_VAE_CONFIG["out_sample_rate"]
SAMPLES_PER_PATCH = MODEL_CONFIG["patch_size"] * 8 * 6 * 5 * 2 * 2 * 2  # 7680


def build_tiny_mlx_voxcpm(folder: pathlib.Path) -> pathlib.Path:
    """Write a tiny random mlx-audio VoxCPM2 checkpoint into `folder` (created if needed) and return it."""
    import mlx.core as mx
    from mlx_audio.tts.models.voxcpm2 import Model, ModelArgs

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mlx_tokenizer = {"add_bos_token": True, "add_eos_token": False}
    vocab_size = write_tokenizer(folder, max_length=MODEL_CONFIG["max_length"], cjk=False, extra_config=mlx_tokenizer)
    config = {**MODEL_CONFIG, "lm_config": {**LM_CONFIG, "vocab_size": vocab_size}}
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    # Seeded weights. MLX cannot restore its global key, so afterwards the global stream is reseeded from a draw
    # taken before the build: the caller's stream stays a function of its own earlier seed.
    resume_seed = cast(int, mx.random.randint(0, 2**31 - 1, ()).item())  # an int array's item is an int
    mx.random.seed(SEED)
    try:
        model = Model(ModelArgs.from_dict(config))
    finally:
        mx.random.seed(resume_seed)
    model.stop_head.weight = mx.zeros_like(model.stop_head.weight)  # stop logits tie: length is max_tokens exactly

    weights = dict(flat(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return folder


def check_tiny_mlx_voxcpm_keys(folder: pathlib.Path) -> None:
    """Assert the saved keys survive `Model.sanitize` unchanged and match the model's parameters exactly."""
    import mlx.core as mx
    from mlx_audio.tts.models.voxcpm2 import Model, ModelArgs

    config = json.loads((pathlib.Path(folder) / "config.json").read_text(encoding="utf-8"))
    model = Model(ModelArgs.from_dict(config))
    saved = cast(dict[str, Any], mx.load(str(pathlib.Path(folder) / "model.safetensors")))  # one file: a dict
    sanitized = model.sanitize(dict(saved))
    expected = {k: v.shape for k, v in flat(model.parameters())}
    assert set(sanitized) == set(saved), sorted(set(sanitized) ^ set(saved))
    assert set(sanitized) == set(expected), sorted(set(sanitized) ^ set(expected))
    assert all(sanitized[k].shape == expected[k] for k in expected)
