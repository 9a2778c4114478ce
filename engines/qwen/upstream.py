"""Import `qwen_tts` (qwen-tts-hf 0.1.1.post1, Qwen3-TTS's code ported to Transformers 5) and fit it to the
Transformers release pinned here (5.24.0, which VoxCPM needs).

The package was ported against an earlier 5.x; four things it relies on changed since, and each would stop it from
loading or generating. Each adapter below restores the package's own behaviour and nothing else; they are written
for exactly the pinned pair (requirements-torch.txt, requirements-nodeps.txt) and must be revisited when either
changes. tests/unit/test_qwen.py loads a checkpoint through them and checks every weight arrives unchanged.

1. `import qwen_tts` imports the 25 Hz speech tokenizer at the top, and with it pysox, torchaudio's Kaldi features
   and onnxruntime. The 12 Hz checkpoints (every Qwen3-TTS-12Hz-* model) never run that code, so pysox and
   torchaudio are not installed and stubs stand in for them (engines/import_stubs.py). The same module prints a
   flash-attn notice on stdout at import; it is logged instead.
2. The package registers a "default" RoPE initialiser that reads `config.rope_theta`. Transformers now looks that
   table up for its own models too (Mimi, the codec's encoder), whose configs keep the base in `rope_parameters`;
   the initialiser reads the base from there for them.
3. Mimi is now split into an encoder and a decoder half, and the attributes the package's codec encoder (a
   `MimiModel` stripped of its decoder) clears are read-only: the codec encoder is Mimi built without its decoder
   half, and the checkpoint's encoder weights, in Mimi's original flat layout, are renamed into the split one on
   load (`CODEC_KEY_MAPPING`, passed as `from_pretrained(key_mapping=...)`).
4. `generate` now hands the KV cache to `forward` as `cache`, not `past_key_values`, and renames
   `past_key_values=` when a model output is built. The talker's and the code predictor's forwards take the cache
   as `past_key_values` again, and their output classes hold it under `cache`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import logging
import re
import types
from collections.abc import Callable
from typing import Any

from engines.import_stubs import stub_if_missing

log = logging.getLogger("polytts.engines.qwen")

_UNUSED = "only Qwen3-TTS's 25 Hz tokenizer uses it, and the 12 Hz checkpoints never load that"

CODEC_ENCODER_RENAMES = (
    ("encoder.encoder.layers.", "encoder.encoder.encoder_seanet.layers."),
    ("encoder.encoder_transformer.", "encoder.encoder.encoder_transformer."),
    ("encoder.downsample.", "encoder.encoder.downsample."),
)
"""Prefixes of the codec's encoder weights as the hub checkpoints store them (Mimi's original layout, under the
codec's `encoder.`), and where Transformers' split Mimi keeps them. `encoder.quantizer.` stays where it was."""

CODEC_KEY_MAPPING = {"^" + re.escape(stored): loaded for stored, loaded in CODEC_ENCODER_RENAMES}


def import_qwen_tts() -> types.ModuleType:
    """Import and return `qwen_tts`, fitted to the pinned Transformers (the module docstring's four adapters)."""
    stub_if_missing("torchaudio.compliance.kaldi", _UNUSED)
    stub_if_missing("sox", _UNUSED)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        module = importlib.import_module("qwen_tts")
    if printed.getvalue().strip():
        log.debug("qwen_tts printed at import: %s", " ".join(printed.getvalue().split()))
    _adapt_once()
    return module


@functools.cache
def _adapt_once() -> None:
    _read_rope_base_from_either_config()
    _codec_encoder_is_split_mimi()
    _cache_passes_as_past_key_values()


def _read_rope_base_from_either_config() -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    package_default = ROPE_INIT_FUNCTIONS["default"]

    def default_rope(config: Any, device: Any = None, seq_len: int | None = None, layer_type: str | None = None) -> Any:
        if not hasattr(config, "rope_theta"):
            config = _WithRopeTheta(config)
        return package_default(config, device, seq_len, layer_type)

    ROPE_INIT_FUNCTIONS["default"] = default_rope


class _WithRopeTheta:
    """A Transformers config seen with the `rope_theta` attribute the package's RoPE initialiser reads."""

    def __init__(self, config: Any) -> None:
        self._config = config
        self.rope_theta = config.rope_parameters["rope_theta"]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def _codec_encoder_is_split_mimi() -> None:
    from qwen_tts.core.tokenizer_12hz import modeling_qwen3_tts_tokenizer_v2 as codec
    from transformers import MimiModel

    class CodecEncoder(MimiModel):
        """The 12 Hz codec's encoder: Mimi without its decoder half (the codec decodes with its own decoder)."""

        def __init__(self, config: Any) -> None:
            config.decoder_config = None
            super().__init__(config)

    codec.Qwen3TTSTokenizerV2Encoder = CodecEncoder


def _cache_passes_as_past_key_values() -> None:
    from qwen_tts.core.models import modeling_qwen3_tts as qwen
    from transformers.utils import ModelOutput

    for name in ("Qwen3TTSTalkerOutputWithPast", "Qwen3TTSTalkerCodePredictorOutputWithPast"):
        fields = [
            ("cache" if f.name == "past_key_values" else f.name, f.type, dataclasses.field(default=None))
            for f in dataclasses.fields(getattr(qwen, name))
        ]
        output = dataclasses.make_dataclass(name, fields, bases=(ModelOutput,))
        output.__module__ = qwen.__name__
        setattr(qwen, name, output)
    for model in (
        qwen.Qwen3TTSTalkerForConditionalGeneration,
        qwen.Qwen3TTSTalkerCodePredictorModelForConditionalGeneration,
    ):
        model.forward = _cache_as_past_key_values(model.forward)


def _cache_as_past_key_values(forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def wrapped(self: Any, *args: Any, cache: Any = None, **kwargs: Any) -> Any:
        if cache is not None:
            kwargs["past_key_values"] = cache
        return forward(self, *args, **kwargs)

    return wrapped
