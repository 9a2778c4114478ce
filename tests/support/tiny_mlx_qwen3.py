"""A tiny, randomly initialised Qwen3-TTS (Base, voice cloning) for mlx-audio's MLX backend, built with no download.

`build_tiny_qwen3_tts(folder)` writes the layout `mlx_audio.tts.utils.load_model(folder)` reads for
`model_type: "qwen3_tts"` (mlx-audio 0.6.2, `mlx_audio/tts/models/qwen3_tts/`):

- `config.json`: `ModelConfig` with `talker_config` (+ its `code_predictor_config`) and `speaker_encoder_config`;
  `tts_model_type: "base"`, so the model has a speaker encoder and `generate(ref_audio=..., ref_text=...)` clones.
- `model.safetensors`: talker + speaker encoder, in the package's own MLX key layout (`talker.*`,
  `speaker_encoder.*`). `load_model` globs only top-level `*.safetensors`, runs `Model.sanitize` (which transposes any
  3-D weight whose key holds "conv" when a shape heuristic, `check_array_shape_qwen3`, thinks it is PyTorch layout) and
  then loads with `strict=True`. A kernel-1 conv of shape (out, 1, in) is only taken as MLX layout when in > 64, so
  every such conv here has more than 64 input channels; `_check_layout` asserts the round trip is exact.
- `speech_tokenizer/config.json` + `speech_tokenizer/model.safetensors`: the 12.5 Hz speech tokenizer (codec),
  loaded by `Model.post_load_hook`, which runs `Qwen3TTSSpeechTokenizer.sanitize`, loads with `strict=False` (so a
  wrong key would silently stay random or keep a wrong shape; `_check_layout` asserts the exact key set, shapes and
  values instead) and wraps the decoder in `mx.compile`. Decoder keys are stored in MLX layout and go through the
  same shape heuristic, so its kernel-1 convs need > 64 input channels too: the quantizer projections get
  `codebook_dim` 130, and the decoder has no `DecoderBlock` at all (`upsample_rates: []`), because every block has
  kernel-1 convs at its output rate, 24 kHz for the last one, and 65 channels there cost ~0.45 s of CPU per frame
  with mlx's reference BLAS. The 1920x upsampling is done by the transposed-conv + ConvNeXt stages
  (`upsampling_ratios` 8, 15, 16; each ratio < `latent_dim` 24, as the heuristic needs). Encoder keys are stored in
  the Hugging Face layout (`encoder.encoder.layers.N...`, q/k/v separate, codebooks as `embed_sum`/`cluster_usage`),
  because sanitize maps those by name with an explicit transpose, no heuristic; its name map needs exactly four
  SEANet ratios and one residual layer per stage, as in the real codec.
- `tokenizer.json` + `tokenizer_config.json`: a byte-level BPE (any text encodes, ~1 token per byte) made with the
  `tokenizers` library, loaded by `transformers.AutoTokenizer` in `post_load_hook`. The model wraps text as
  `<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n` and slices the ids by position ([:3] role,
  [3:-5] text, ref text [3:-2]), so `<|im_start|>`/`<|im_end|>` are special tokens and "assistant" is a single token
  (merges spell it out). The TTS special tokens `<tts_pad>`, `<tts_text_bos>`, `<tts_text_eod>` get ids 267-269 and
  config.json's `tts_pad/bos/eos_token_id` and `im_start/im_end_token_id` are read back from the tokenizer.
- `generation_config.json`: sampling defaults (as the real checkpoint ships) with `max_new_tokens` small, so a call
  that passes no `max_tokens` still stops.

Rates are the real ones: 24 kHz in and out, 12.5 codec frames per second, 1920 samples per frame, 16 code groups
(the encoder keeps 16 quantizers, as `Qwen3TTSSpeechTokenizerEncoder.valid_num_quantizers` hard-codes). What is
tiny: hidden sizes 32, one or two layers, a 64-entry codebook (talker codec vocab 64 + 1024 specials, since the model
suppresses the top 1024 ids), a 72-channel ECAPA speaker encoder; ~0.65M parameters in all (talker 0.17M, speaker
encoder 0.10M, codec 0.38M). On a 2-core CPU, `load_model` takes ~0.05 s once transformers is imported (the import
itself ~2.5 s), and a call costs ~0.05 s per frame: `max_tokens=8` ~0.35 s (0.7 s with ICL, whose non-streaming
decode re-runs the reference frames), `max_tokens=32` ~1.4-1.9 s. The first call in a fresh `$TMPDIR` also pays
~9 s of g++ for mlx's compiled CPU kernels, which are then cached in `$TMPDIR/mlx/<version>/cpu/`.

Stopping: with `eos_reachable=False` (default) `codec_eos_token_id` is the talker vocab size, an id the talker can
never sample, so every call runs exactly `max_tokens` frames (the real model's EOS, 2150, is inside its 3072 vocab).
With `eos_reachable=True` EOS is id 166 (codebook + 102, the real offset) and the random model stops at random
(~1 in 65 per frame). Streaming chunks are exactly frames * 1920 samples. Non-streaming audio is trimmed by the model
to `(#frames whose first code > 0) * 1920` samples (a first code of 0 is 1 in 64), and with a reference transcript
(ICL) the reference frames are decoded with the new ones and cut off proportionally, so that length is not a
multiple of 1920.

Weights: the package's own classes are built under `mx.random.seed(SEED)` (mlx's default init); the codec encoder's
codebooks, zeros at init, get seeded random centroids (`cluster_usage` 1) so reference clips encode to varied codes.
Every build is identical.
"""

from __future__ import annotations

import json
import pathlib

SEED = 20240611
OUTPUT_LAYER = "decoder.decoder.2.conv."
OUTPUT_GAIN = 100.0
"""The codec's last convolution is scaled so that the random decoder's noise peaks near 0.3 (at init it peaks near
0.003, which the seam joiner rightly takes for silence and trims away)."""

CODEBOOK_SIZE = 64  # codec codebook entries (real: 2048)
NUM_CODE_GROUPS = 16  # real value; the codec encoder hard-codes 16 valid quantizers
TALKER_VOCAB = CODEBOOK_SIZE + 1024  # the model suppresses ids [vocab - 1024, vocab) except EOS
HIDDEN = 32

# Codec control ids: the real checkpoint's offsets above its 2048-entry codebook (2148 = 2048 + 100, ...).
CODEC_IDS = {
    "codec_pad_id": CODEBOOK_SIZE + 100,
    "codec_bos_id": CODEBOOK_SIZE + 101,
    "codec_think_id": CODEBOOK_SIZE + 106,
    "codec_nothink_id": CODEBOOK_SIZE + 107,
    "codec_think_bos_id": CODEBOOK_SIZE + 108,
    "codec_think_eos_id": CODEBOOK_SIZE + 109,
}
REACHABLE_EOS_ID = CODEBOOK_SIZE + 102
LANGUAGE_OFFSETS = {
    "chinese": 7,
    "english": 2,
    "german": 5,
    "italian": 22,
    "portuguese": 23,
    "spanish": 6,
    "japanese": 10,
    "korean": 16,
    "french": 13,
    "russian": 21,
}

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
]
MERGED_WORDS = ["assistant"]  # must be one token: the model slices the chat template by token position
TEXT_VOCAB = 288  # >= bytes + merges + specials

SPEAKER_ENCODER_CONFIG = {
    "mel_dim": 128,  # hard-coded by Model.extract_speaker_embedding
    "enc_dim": HIDDEN,  # the x-vector is spliced into the talker's input sequence
    "enc_channels": [72, 72, 72],  # >64: kernel-1 convs must pass sanitize's shape heuristic
    "enc_kernel_sizes": [5, 3, 1],
    "enc_dilations": [1, 2, 1],
    "enc_attention_channels": 72,
    "enc_res2net_scale": 4,
    "enc_se_channels": 72,
    "sample_rate": 24000,
}

CODE_PREDICTOR_CONFIG = {
    "vocab_size": CODEBOOK_SIZE,
    "hidden_size": HIDDEN,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 65536,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "num_code_groups": NUM_CODE_GROUPS,
}

TALKER_CONFIG = {
    "code_predictor_config": CODE_PREDICTOR_CONFIG,
    "vocab_size": TALKER_VOCAB,
    "hidden_size": HIDDEN,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_scaling": {"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default"},  # sums to head_dim/2
    "num_code_groups": NUM_CODE_GROUPS,
    "text_hidden_size": HIDDEN,
    "text_vocab_size": TEXT_VOCAB,
    **CODEC_IDS,
    "codec_language_id": {lang: CODEBOOK_SIZE + off for lang, off in LANGUAGE_OFFSETS.items()},
    "spk_id": {},
    "spk_is_dialect": {},
}

DECODER_CONFIG = {
    "latent_dim": 24,
    "codebook_dim": 130,  # quantizer projections are kernel-1 convs: codebook_dim // 2 must be > 64 (see above)
    "codebook_size": CODEBOOK_SIZE,
    "decoder_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 32,
    "intermediate_size": 64,
    "layer_scale_initial_scale": 0.01,
    "max_position_embeddings": 8000,
    "head_dim": 16,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "num_key_value_heads": 2,
    "num_quantizers": NUM_CODE_GROUPS,
    "num_semantic_quantizers": 1,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "semantic_codebook_size": CODEBOOK_SIZE,
    "sliding_window": 72,
    # No DecoderBlocks: each has kernel-1 convs at its output rate (24 kHz for the last one), which the sanitize
    # heuristic forces to > 64 channels, ~0.45 s of CPU per 12.5 Hz frame here. The whole 1920x upsampling is done
    # by the transposed-conv + ConvNeXt stages instead (ratio < latent_dim, as the heuristic needs).
    "upsample_rates": [],
    "upsampling_ratios": [8, 15, 16],  # 8 * 15 * 16 = 1920 samples per 12.5 Hz frame at 24 kHz, as in the real codec
    "vector_quantization_hidden_dimension": 65,
}

ENCODER_CONFIG = {
    "frame_rate": 12.5,
    "audio_channels": 1,
    "codebook_dim": 16,
    "codebook_size": CODEBOOK_SIZE,
    "compress": 2,
    "dilation_growth_rate": 2,
    "head_dim": 16,
    "hidden_act": "gelu",
    "hidden_size": 32,
    "intermediate_size": 64,
    "kernel_size": 7,
    "last_kernel_size": 3,
    "layer_scale_initial_scale": 0.01,
    "max_position_embeddings": 8000,
    "norm_eps": 1e-5,
    "num_attention_heads": 2,
    "num_filters": 8,
    "num_hidden_layers": 1,
    "num_key_value_heads": 2,
    "num_quantizers": NUM_CODE_GROUPS,
    "num_residual_layers": 1,  # sanitize's HF-name map assumes one residual layer per stage ...
    "residual_kernel_size": 3,
    "rope_theta": 10000.0,
    "sampling_rate": 24000,
    "sliding_window": 250,
    "upsampling_ratios": [8, 6, 5, 4],  # ... and four stages; 960 samples -> 25 Hz, downsampled x2 to 12.5 Hz
    "use_causal_conv": True,
    "use_conv_shortcut": False,
    "vector_quantization_hidden_dimension": 16,
}

SPEECH_TOKENIZER_CONFIG = {
    "model_type": "qwen3_tts_tokenizer_12hz",
    "encoder_config": ENCODER_CONFIG,
    "decoder_config": DECODER_CONFIG,
    "encoder_valid_num_quantizers": NUM_CODE_GROUPS,
    "input_sample_rate": 24000,
    "output_sample_rate": 24000,
    "decode_upsample_rate": 1920,
    "encode_downsample_rate": 1920,
}

GENERATION_CONFIG = {
    "do_sample": True,
    "temperature": 0.9,
    "top_k": 50,
    "top_p": 1.0,
    "repetition_penalty": 1.05,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (what tokenizers' ByteLevel pre-tokenizer emits)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {byte: chr(char) for byte, char in zip(printable, chars)}


def _write_tokenizer(folder: pathlib.Path) -> dict[str, int]:
    """Byte-level BPE: ids 0-255 are the bytes, then merges that make each MERGED_WORDS entry one token, then the
    special tokens. Returns the special tokens' ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    table = _bytes_to_unicode()
    vocab = {table[byte]: byte for byte in range(256)}
    merges: list[tuple[str, str]] = []
    for word in MERGED_WORDS:
        symbols = [table[b] for b in word.encode("utf-8")]
        left = symbols[0]
        for right in symbols[1:]:
            if left + right not in vocab:
                merges.append((left, right))
                vocab[left + right] = len(vocab)
            left += right
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    assert len(vocab) <= TEXT_VOCAB

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 32768,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "added_tokens_decoder": {
            str(vocab[t]): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t in SPECIAL_TOKENS
        },
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return {t: vocab[t] for t in SPECIAL_TOKENS}


def _model_config(special: dict[str, int], eos_reachable: bool) -> dict:
    talker = dict(TALKER_CONFIG)
    talker["codec_eos_token_id"] = REACHABLE_EOS_ID if eos_reachable else TALKER_VOCAB
    return {
        "model_type": "qwen3_tts",
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "tts_model_type": "base",
        "tts_model_size": "tiny",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "im_start_token_id": special["<|im_start|>"],
        "im_end_token_id": special["<|im_end|>"],
        "tts_pad_token_id": special["<tts_pad>"],
        "tts_bos_token_id": special["<tts_text_bos>"],
        "tts_eos_token_id": special["<tts_text_eod>"],
        "sample_rate": 24000,
        "talker_config": talker,
        "speaker_encoder_config": SPEAKER_ENCODER_CONFIG,
    }


# --- the codec encoder's Hugging Face key layout (what Qwen3TTSSpeechTokenizer.sanitize maps by name) ---

_SEANET_DIRECT = {
    "init_conv1d": 0,
    "layers.0.downsample": 3,
    "layers.1.downsample": 6,
    "layers.2.downsample": 9,
    "layers.3.downsample": 12,
    "final_conv1d": 14,
}
_TRANSFORMER_NAMES = {
    "self_attn.out_proj.weight": "self_attn.o_proj.weight",
    "gating.linear1.weight": "mlp.fc1.weight",
    "gating.linear2.weight": "mlp.fc2.weight",
    "norm1.weight": "input_layernorm.weight",
    "norm1.bias": "input_layernorm.bias",
    "norm2.weight": "post_attention_layernorm.weight",
    "norm2.bias": "post_attention_layernorm.bias",
    "layer_scale_1.scale": "self_attn_layer_scale.scale",
    "layer_scale_2.scale": "mlp_layer_scale.scale",
}


def _encoder_to_hf(name: str, value):
    """MLX name/array of `encoder_model.*` -> list of (HF name, array) that sanitize turns back into it."""
    import mlx.core as mx

    rest = name[len("encoder_model.") :]
    conv_t = (lambda v: v.swapaxes(-1, -2)) if value.ndim == 3 else (lambda v: v)
    if rest.startswith("encoder."):
        rest = rest[len("encoder.") :]
        for prefix, n in _SEANET_DIRECT.items():
            if rest.startswith(prefix + ".conv.conv."):
                return [(f"encoder.encoder.layers.{n}.conv.{rest[len(prefix) + 11 :]}", conv_t(value))]
        # layers.{L}.residuals.0.block.{C}.conv.conv.{weight|bias}
        parts = rest.split(".")
        assert parts[0] == "layers" and parts[2:4] == ["residuals", "0"] and parts[4] == "block", name
        n = 1 + 3 * int(parts[1])
        b = {0: 1, 1: 3}[int(parts[5])]
        return [(f"encoder.encoder.layers.{n}.block.{b}.conv.{parts[-1]}", conv_t(value))]
    if rest.startswith("encoder_transformer.transformer.layers."):
        parts = rest.split(".")
        i, tail = parts[3], ".".join(parts[4:])
        base = f"encoder.encoder_transformer.layers.{i}."
        if tail == "self_attn.in_proj.weight":
            q, k, v = mx.split(value, 3, axis=0)
            return [
                (base + "self_attn.q_proj.weight", q),
                (base + "self_attn.k_proj.weight", k),
                (base + "self_attn.v_proj.weight", v),
            ]
        return [(base + _TRANSFORMER_NAMES[tail], value)]
    if rest.startswith("downsample.conv.conv."):
        return [("encoder.downsample." + rest[len("downsample.conv.conv.") :], conv_t(value))]
    if rest.startswith("quantizer."):
        parts = rest.split(".")
        group = {"rvq_first": "semantic_residual_vector_quantizer", "rvq_rest": "acoustic_residual_vector_quantizer"}[
            parts[1]
        ]
        if parts[2] in ("input_proj", "output_proj"):
            return [(f"encoder.quantizer.{group}.{parts[2]}.weight", conv_t(value))]
        # vq.layers.{i}.codebook.{embedding_sum|cluster_usage|initialized}
        hf_leaf = {"embedding_sum": "embed_sum", "cluster_usage": "cluster_usage", "initialized": "initialized"}
        return [(f"encoder.quantizer.{group}.layers.{parts[4]}.codebook.{hf_leaf[parts[-1]]}", value)]
    raise AssertionError(f"unmapped codec encoder weight {name}")


def _check_layout(saved: dict, sanitize, expected: dict, skip=()) -> None:
    """sanitize(saved) must give exactly the model's keys and shapes (less `skip`), and the same arrays."""
    import mlx.core as mx

    loaded = sanitize(dict(saved))
    want = {k: v for k, v in expected.items() if not any(s in k for s in skip)}
    missing, unexpected = set(want) - set(loaded), set(loaded) - set(want)
    assert not missing and not unexpected, f"missing {sorted(missing)}, unexpected {sorted(unexpected)}"
    for key, value in want.items():
        assert loaded[key].shape == value.shape, f"{key}: {loaded[key].shape} != {value.shape}"
        assert mx.array_equal(loaded[key], value).item(), f"{key} changed in sanitize"


def build_tiny_qwen3_tts(
    folder: pathlib.Path, *, eos_reachable: bool = False, max_new_tokens: int = 16
) -> pathlib.Path:
    """Write a tiny random Qwen3-TTS Base checkpoint into `folder` (created if needed) and return it.

    `max_new_tokens` goes into generation_config.json: the frame cap when `generate()` gets no `max_tokens`.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.qwen3_tts.config import (
        ModelConfig,
        Qwen3TTSTokenizerConfig,
    )
    from mlx_audio.tts.models.qwen3_tts.qwen3_tts import Model
    from mlx_audio.tts.models.qwen3_tts.speech_tokenizer import Qwen3TTSSpeechTokenizer

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    special = _write_tokenizer(folder)
    config = _model_config(special, eos_reachable)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    generation = {**GENERATION_CONFIG, "max_new_tokens": int(max_new_tokens)}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2), encoding="utf-8")

    mx.random.seed(SEED)  # note: reseeds mlx's global generator; seed again before sampling if that matters
    model = Model(ModelConfig.from_dict(config))
    codec = Qwen3TTSSpeechTokenizer(Qwen3TTSTokenizerConfig(**_codec_config_args()))
    weights = dict(tree_flatten(model.parameters()))
    codec_weights = dict(tree_flatten(codec.parameters()))
    for key in list(codec_weights):  # zero-initialised codebooks would encode every clip to code 0
        if key.startswith("encoder_model.") and key.endswith(".codebook.embedding_sum"):
            codec_weights[key] = mx.random.normal(codec_weights[key].shape)
        elif key.startswith("encoder_model.") and key.endswith(".codebook.cluster_usage"):
            codec_weights[key] = mx.ones(codec_weights[key].shape)
        elif key.startswith(OUTPUT_LAYER):
            codec_weights[key] = codec_weights[key] * OUTPUT_GAIN
    mx.eval(weights, codec_weights)

    _check_layout(weights, Model.sanitize, weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})

    saved: dict = {}
    for key, value in codec_weights.items():
        if key.startswith("encoder_model."):
            saved.update(_encoder_to_hf(key, value))
        else:
            saved[key] = value
    # sanitize drops the codebooks' `initialized` flag (left at its init value) and the decoder keeps them as is
    _check_layout(saved, Qwen3TTSSpeechTokenizer.sanitize, codec_weights, skip=(".codebook.initialized",))
    sub = folder / "speech_tokenizer"
    sub.mkdir(exist_ok=True)
    (sub / "config.json").write_text(json.dumps(SPEECH_TOKENIZER_CONFIG, indent=2), encoding="utf-8")
    mx.save_safetensors(str(sub / "model.safetensors"), saved, metadata={"format": "mlx"})
    return folder


def _codec_config_args() -> dict:
    """Qwen3TTSTokenizerConfig arguments, built the way Model.post_load_hook builds them from the json."""
    from mlx_audio.tts.models.qwen3_tts.config import (
        Qwen3TTSTokenizerDecoderConfig,
        Qwen3TTSTokenizerEncoderConfig,
    )

    nested = ("model_type", "encoder_config", "decoder_config")
    top = {k: v for k, v in SPEECH_TOKENIZER_CONFIG.items() if k not in nested}
    return {
        **top,
        "encoder_config": Qwen3TTSTokenizerEncoderConfig(**ENCODER_CONFIG),
        "decoder_config": Qwen3TTSTokenizerDecoderConfig(**DECODER_CONFIG),
    }
