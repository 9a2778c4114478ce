"""Import FunAudioLLM's CosyVoice code (the `cosyvoice` and `matcha` packages of cosyvoice-minicpmo 0.1.0) and build a
CosyVoice 2 model from a checkpoint folder as the official `CosyVoice2` class does.

cosyvoice-minicpmo carries the upstream tree of 2025-06-27 (FunAudioLLM/CosyVoice at ff9694d, Apache-2.0): `llm/`,
`flow/`, `hifigan/`, `transformer/`, `tokenizer/`, `utils/` and Matcha-TTS's `matcha/` unchanged. Only `cli/` differs:
MiniCPM-o runs the token-to-waveform half alone, so its `CosyVoice2` builds the model without the LLM, `load` skips
the LLM's weights, and the frontend's text normalizers are commented out. `load_cosyvoice2` below is upstream's
`CosyVoice2.__init__` with those parts restored, and nothing else changed:

1. The checkpoint's `cosyvoice2.yaml` also declares the training setup (GAN discriminators, the data pipeline), which
   hyperpyyaml would build and which imports torchaudio, pyarrow, pyworld and matplotlib. Only what inference reads
   is kept (`INFERENCE_KEYS` and the plain values they refer to), so only that is built.
2. The LLM (`Qwen2LM` over the checkpoint's Qwen2 `CosyVoice-BlankEN`) is built, its `llm.pt` loaded as upstream's
   `CosyVoiceModel.load` does, and attached to the model.
3. Chinese text normalization is upstream's: wetext's Chinese grammar, built as upstream builds its `ZhNormalizer`
   (less `overwrite_cache`, which the pinned wetext no longer takes).
4. Upstream picks CUDA whenever torch sees it; the model and the frontend run on the device the service chose.

Imports the inference path never uses get stand-ins (engines/import_stubs.py): torchaudio (the frontend takes only
`compliance.kaldi.fbank` from it, for the speaker embedding: torchaudio's port in engines/torchaudio_ops.py,
written for dots.tts, which takes the same filterbank, stands in for it), Matcha-TTS's training helpers
(`matcha.utils`'s `__init__` imports hydra, lightning, rich and matplotlib; inference needs only `matcha.utils.audio`)
and lightning's `rank_zero_only`, which Matcha's logger applies to each logging method (a no-op in one process).
`cosyvoice.utils.file_utils` configures the root logger at import; the service's logging is put back.
"""

from __future__ import annotations

import io
import logging
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.base import EngineLoadError
from engines.import_stubs import stub_if_missing, without_init_if_broken

INFERENCE_KEYS = ("llm", "flow", "hift", "get_tokenizer", "feat_extractor", "allowed_special", "sample_rate")
"""What upstream's `CosyVoice2.__init__` reads of the checkpoint's configuration."""

CONFIG = "cosyvoice2.yaml"
BACKBONE = "CosyVoice-BlankEN"
SPEECH_TOKENIZER = "speech_tokenizer_v2.onnx"
SPEAKER_ENCODER = "campplus.onnx"
WEIGHTS = ("llm.pt", "flow.pt", "hift.pt")

_UNUSED = "CosyVoice's inference path does not use it"


@dataclass
class CosyVoice2:
    """A loaded CosyVoice 2 checkpoint: upstream's frontend and model objects."""

    frontend: Any
    """`cosyvoice.cli.frontend.CosyVoiceFrontEnd`: text tokens, speech tokens, speaker embedding, prompt features."""
    model: Any
    """`cosyvoice.cli.model.CosyVoice2Model` with its LLM: `llm`, `flow`, `hift` and `token2wav`."""
    sample_rate: int


def _rank_zero_only(function: Callable[..., Any]) -> Callable[..., Any]:
    """lightning's `rank_zero_only` in a single process: the function itself."""
    return function


def import_cosyvoice() -> types.ModuleType:
    """Import and return `cosyvoice`, with the stand-ins the module docstring lists."""
    from engines.torchaudio_ops import fbank

    stub_if_missing("torchaudio.compliance.kaldi", _UNUSED + " beyond fbank", provides={"fbank": fbank})
    stub_if_missing("lightning.pytorch.utilities", _UNUSED, provides={"rank_zero_only": _rank_zero_only})
    without_init_if_broken("matcha.utils", "it re-exports Matcha-TTS's training helpers, which inference never uses")
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        import cosyvoice.cli.frontend
        import cosyvoice.cli.model
        import cosyvoice.utils.common
    finally:  # cosyvoice.utils.file_utils calls logging.basicConfig(level=DEBUG)
        root.handlers[:] = handlers
        root.setLevel(level)
    import cosyvoice

    return cosyvoice


def inference_config(text: str) -> str:
    """The checkpoint's configuration less what only training builds (the module docstring's first point)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar

    yaml = YAML()  # round trip: hyperpyyaml's tags (!new:, !ref, !name:) are kept as written
    document = yaml.load(text)
    for key in list(document):
        plain = not isinstance(document[key], CommentedMap | CommentedSeq | TaggedScalar)
        if key not in INFERENCE_KEYS and not plain:
            del document[key]
    kept = io.StringIO()
    yaml.dump(document, kept)
    return kept.getvalue()


def load_cosyvoice2(folder: Path, device: str, setting: str) -> CosyVoice2:
    """A CosyVoice 2 checkpoint folder loaded on `device` as upstream's `CosyVoice2(folder)` loads it (with the
    module docstring's changes); `setting` names the variable that chose the folder, for errors."""
    missing = [name for name in (CONFIG, SPEECH_TOKENIZER, SPEAKER_ENCODER, *WEIGHTS) if not (folder / name).is_file()]
    if missing or not (folder / BACKBONE).is_dir():
        what = ", ".join(missing + ([] if (folder / BACKBONE).is_dir() else [BACKBONE + "/"]))
        raise EngineLoadError(f"{folder} is not a CosyVoice 2 checkpoint: it has no {what} ({setting})")
    import_cosyvoice()
    import torch
    from cosyvoice.cli.frontend import CosyVoiceFrontEnd
    from cosyvoice.cli.model import CosyVoice2Model
    from hyperpyyaml import load_hyperpyyaml

    text = inference_config((folder / CONFIG).read_text(encoding="utf-8"))
    configs = load_hyperpyyaml(text, overrides={"qwen_pretrain_path": str(folder / BACKBONE)})
    if type(configs["flow"]).__name__ != "CausalMaskedDiffWithXvec":
        raise EngineLoadError(f"{folder} is not a CosyVoice 2 checkpoint: its flow is not CosyVoice 2's ({setting})")
    frontend = CosyVoiceFrontEnd(
        configs["get_tokenizer"],
        configs["feat_extractor"],
        str(folder / SPEAKER_ENCODER),
        str(folder / SPEECH_TOKENIZER),
        "",  # spk2info.pt holds CosyVoice-300M-SFT's named speakers, which zero-shot cloning never reads
        configs["allowed_special"],
    )
    frontend.device = torch.device(device)
    _restore_chinese_normalizer(frontend)
    model = CosyVoice2Model(configs["llm"], configs["flow"], configs["hift"], fp16=False)
    model.device = torch.device(device)
    model.llm = configs["llm"]
    model.load(*(str(folder / name) for name in WEIGHTS))
    model.llm.load_state_dict(torch.load(folder / "llm.pt", map_location=model.device), strict=True)
    model.llm.to(model.device).eval()
    return CosyVoice2(frontend, model, int(configs["sample_rate"]))


def _restore_chinese_normalizer(frontend: Any) -> None:
    """Upstream's frontend normalizes Chinese text with wetext (without ttsfrd); cosyvoice-minicpmo comments it out."""
    from wetext import Normalizer

    frontend.use_ttsfrd = False
    frontend.zh_tn_model = Normalizer(lang="zh", remove_erhua=False, full_to_half=False)
