"""A tiny, randomly initialised CosyVoice 2 checkpoint built at test time with no download.

`build_tiny_cosyvoice(folder)` writes the layout of the hub's `FunAudioLLM/CosyVoice2-0.5B`, which
engines/cosyvoice/upstream.py loads through the package's own classes:

- `cosyvoice2.yaml`: the configuration of the real checkpoint (upstream's examples/libritts/cosyvoice2/conf), training
  sections (GAN discriminators, data pipeline) included, with the model's sizes shrunk. The flow's conformer keeps
  512 channels (upstream's encoder hard-codes them); the mel bins (80), rates (24 kHz, 25 speech tokens a second, 480
  samples a mel frame) and the speech vocabulary (6561) are the real ones;
- `llm.pt`, `flow.pt`, `hift.pt`: the state dicts of the models that configuration builds, under `torch.manual_seed`.
  The LLM's output bias rules out its three stop and fill tokens, so every generation runs to its length bound:
  `LENGTH_RATIO` speech tokens per text token (upstream's `max_token_text_ratio`), 960 samples each;
- `CosyVoice-BlankEN/`: the Qwen2 backbone (a two-layer `Qwen2ForCausalLM` in Transformers' layout) and its
  tokenizer: Qwen2's byte-level BPE without merges, so one text token per UTF-8 byte;
- `speech_tokenizer_v2.onnx` and `campplus.onnx`, built with `onnx`: the speech tokenizer reads the 128-bin Whisper
  log-mel (100 frames a second) the frontend computes and gives one token every 4 frames (25 a second) out of
  `SPEECH_CODES`; the speaker encoder turns the frontend's 80-bin Kaldi fbank into a 192-dimensional embedding.

Every build is identical.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

SEED = 20250627
END_OF_TEXT = "<|endoftext|>"
HIDDEN = 64
SPEECH_CODES = 64
"""Speech tokens the tiny speech tokenizer emits (of the vocabulary's 6561)."""
LENGTH_RATIO = 20
"""Speech tokens per text token of every generation: upstream's max_token_text_ratio (the stop token is ruled out)."""
SAMPLES_PER_TOKEN = 960
"""24 kHz samples per speech token: 2 mel frames of 480."""

YAML = """\
# set random seed, so that you may reproduce your result.
__set_seed1: !apply:random.seed [1986]
__set_seed2: !apply:numpy.random.seed [1986]
__set_seed3: !apply:torch.manual_seed [1986]
__set_seed4: !apply:torch.cuda.manual_seed_all [1986]

# fixed params
sample_rate: 24000
llm_input_size: {hidden}
llm_output_size: {hidden}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2

# stream related params
chunk_size: 25 # streaming inference chunk size, in token
num_decoding_left_chunks: -1 # streaming inference flow decoder left chunk size, <0 means use all left chunks

llm: !new:cosyvoice.llm.llm.Qwen2LM
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1

flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec
    input_size: 512
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: 512
        attention_heads: 4
        linear_units: 64
        num_blocks: 1
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: 512
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: [32]
            dropout: 0.0
            attention_head_dim: 16
            n_blocks: 1
            num_mid_blocks: 1
            num_heads: 2
            act_fn: 'gelu'
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

hift: !new:cosyvoice.hifigan.generator.HiFTGenerator
    in_channels: 80
    base_channels: 32
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3]
    resblock_dilation_sizes: [[1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: 32

# gan related module
mel_spec_transform1: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: null
    center: False
hifigan: !new:cosyvoice.hifigan.hifigan.HiFiGan
    generator: !ref <hift>
    discriminator: !new:cosyvoice.hifigan.discriminator.MultipleDiscriminator
        mpd: !new:matcha.hifigan.models.MultiPeriodDiscriminator
        mrd: !new:cosyvoice.hifigan.discriminator.MultiResSpecDiscriminator
    mel_spec_transform: [
        !ref <mel_spec_transform1>
    ]

# processor functions
parquet_opener: !name:cosyvoice.dataset.processor.parquet_opener
get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
allowed_special: 'all'
tokenize: !name:cosyvoice.dataset.processor.tokenize
    get_tokenizer: !ref <get_tokenizer>
    allowed_special: !ref <allowed_special>
resample: !name:cosyvoice.dataset.processor.resample
    resample_rate: !ref <sample_rate>
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: 8000
    center: False
compute_fbank: !name:cosyvoice.dataset.processor.compute_fbank
    feat_extractor: !ref <feat_extractor>
    token_mel_ratio: 2
compute_f0: !name:cosyvoice.dataset.processor.compute_f0
    sample_rate: !ref <sample_rate>
    hop_size: 480

# dataset processor pipeline
data_pipeline: [
    !ref <parquet_opener>,
    !ref <tokenize>,
    !ref <resample>,
    !ref <compute_fbank>,
]
data_pipeline_gan: [
    !ref <parquet_opener>,
    !ref <tokenize>,
    !ref <resample>,
    !ref <compute_fbank>,
    !ref <compute_f0>,
]

# llm flow train conf
train_conf:
    optim: adam
    optim_conf:
        lr: 1e-5 # change to 1e-5 during sft
    scheduler: constantlr # change to constantlr during sft
    scheduler_conf:
        warmup_steps: 2500
    max_epoch: 200
    grad_clip: 5
    accum_grad: 2
    log_interval: 100
    save_per_step: -1
"""


def _write_backbone(folder: pathlib.Path) -> None:
    """The Qwen2 backbone `Qwen2Encoder` loads with `from_pretrained`, and the tokenizer `get_qwen_tokenizer` loads."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {symbol: index for index, symbol in enumerate(bytes_to_unicode().values())}
    vocab[END_OF_TEXT] = len(vocab)
    Qwen2Tokenizer(vocab=vocab, merges=[], eos_token=END_OF_TEXT, pad_token=END_OF_TEXT).save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=len(vocab) + 64,  # room for the special tokens CosyVoice's QwenTokenizer adds
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)


def _onnx_model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    output: onnx.ValueInfoProto,
    weights: dict[str, np.ndarray],
    path: pathlib.Path,
) -> None:
    graph = helper.make_graph(
        nodes,
        path.stem,
        inputs,
        [output],
        initializer=[numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _write_onnx(folder: pathlib.Path, rng: np.random.Generator) -> None:
    _onnx_model(  # feats (1, 128, frames), feats_length (1,) -> tokens (1, frames / 4)
        [
            helper.make_node("Conv", ["feats", "codebook"], ["scores"], kernel_shape=[4], strides=[4]),
            helper.make_node("ArgMax", ["scores"], ["codes"], axis=1, keepdims=0),
            helper.make_node("Cast", ["codes"], ["tokens"], to=TensorProto.INT32),
        ],
        [
            helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "frames"]),
            helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1]),
        ],
        helper.make_tensor_value_info("tokens", TensorProto.INT32, [1, "tokens"]),
        {"codebook": rng.standard_normal((SPEECH_CODES, 128, 4)).astype(np.float32)},
        folder / "speech_tokenizer_v2.onnx",
    )
    _onnx_model(  # fbank (1, frames, 80) -> embedding (1, 192)
        [
            helper.make_node("ReduceMean", ["input"], ["pooled"], axes=[1], keepdims=0),
            helper.make_node("MatMul", ["pooled", "projection"], ["embedding"]),
        ],
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, "frames", 80])],
        helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, 192]),
        {"projection": rng.standard_normal((80, 192)).astype(np.float32)},
        folder / "campplus.onnx",
    )


def build_tiny_cosyvoice(folder: pathlib.Path) -> pathlib.Path:
    """Write a tiny random CosyVoice 2 checkpoint into `folder` (created if needed) and return it."""
    from hyperpyyaml import load_hyperpyyaml

    from engines.cosyvoice.upstream import BACKBONE, import_cosyvoice, inference_config

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cosyvoice2.yaml").write_text(YAML.format(hidden=HIDDEN), encoding="utf-8")
    import_cosyvoice()
    with torch.random.fork_rng(devices=[]):  # seeded weights without disturbing the caller's RNG
        torch.manual_seed(SEED)
        _write_backbone(folder / BACKBONE)
        text = inference_config((folder / "cosyvoice2.yaml").read_text(encoding="utf-8"))
        configs = load_hyperpyyaml(text, overrides={"qwen_pretrain_path": str(folder / BACKBONE)})
        llm = configs["llm"]
        with torch.no_grad():
            llm.llm_decoder.bias[llm.speech_token_size :] = -1e4  # no stop, no fill token: every generation is full
        torch.save(llm.state_dict(), folder / "llm.pt")
        torch.save(configs["flow"].state_dict(), folder / "flow.pt")
        torch.save(configs["hift"].state_dict(), folder / "hift.pt")
    _write_onnx(folder, np.random.default_rng(SEED))
    return folder
