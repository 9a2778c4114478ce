"""What configures Qwen3-TTS, on PyTorch and on MLX alike: its node settings (`POLYTTS_*`, composed into the
service's `Settings`) and the parameters a request may set, with the bound those parameters must respect."""

from __future__ import annotations

import logging

from pydantic import Field, field_validator

from engines.base import EngineParams, Param
from engines.voxcpm.config import VoxCPMReferenceSettings
from errors import InvalidInput

log = logging.getLogger("polytts.engines.qwen")

DEFAULT_MAX_REF_SECONDS = 15.0


class QwenParams(EngineParams):
    """What a Qwen3-TTS request may set (the package's own defaults)."""

    temperature: float = Field(
        0.9, strict=True, gt=0, le=2.0, description="Qwen3-TTS: sampling temperature (default 0.9)."
    )
    top_k: int = Field(50, strict=True, ge=1, le=1000, description="Qwen3-TTS: top-k sampling (default 50).")
    top_p: float = Field(1.0, strict=True, gt=0, le=1.0, description="Qwen3-TTS: nucleus sampling (default 1.0).")
    repetition_penalty: float = Field(
        1.05, strict=True, gt=0, le=2.0, description="Qwen3-TTS: penalty on repeating codes (1.05)."
    )
    subtalker_temperature: float = Field(
        0.9,
        strict=True,
        gt=0,
        le=2.0,
        description="Qwen3-TTS: sampling temperature of the residual codebooks (default 0.9).",
    )
    subtalker_top_k: int = Field(
        50, strict=True, ge=1, le=1000, description="Qwen3-TTS: top-k of the residual codebooks (50)."
    )
    subtalker_top_p: float = Field(
        1.0,
        strict=True,
        gt=0,
        le=1.0,
        description="Qwen3-TTS: nucleus sampling of the residual codebooks (default 1.0).",
    )
    max_new_tokens: int = Field(
        0,
        strict=True,
        ge=0,
        le=20_000,
        description="Qwen3-TTS: bound on the audio frames (12.5 per second) of one generation; 0 (the default) is "
        "the node's bound, POLYTTS_QWEN_MAX_TOKENS, which is also the ceiling.",
    )
    non_streaming_mode: bool = Field(
        False, description="Qwen3-TTS: read the whole text before speaking (default false: text fed in as it speaks)."
    )

    @field_validator("max_new_tokens")
    @classmethod
    def _speaks_at_least_a_frame(cls, value: int) -> int:
        if value == 1:  # the first step only reads the text: one step makes no audio at all
            raise ValueError("must be 0 (this node's bound) or at least 2: the first step makes no audio")
        return value


def check_frame_bound(params: dict[str, Param], bound: int) -> None:
    """A request's `max_new_tokens` may lower this node's bound on frames per generation, never raise it."""
    if int(params["max_new_tokens"]) > bound:  # 0 is the node's bound itself
        raise InvalidInput(
            f"max_new_tokens {params['max_new_tokens']} is above this node's bound of {bound} frames "
            "(POLYTTS_QWEN_MAX_TOKENS)",
            code="max_new_tokens_too_large",
        )


class QwenSettings(VoxCPMReferenceSettings):
    """Qwen3-TTS's node settings: weights, the bounds of one generation and of its reference clip (and, deprecated,
    VoxCPM's bound on reference clips, which Qwen3-TTS read before it had its own)."""

    qwen_model: str = "Qwen/Qwen3-TTS-12Hz-1.7B-Base"
    """PyTorch runtimes (CUDA, MPS, CPU): Qwen3-TTS weights, a hub id (fetched into the hub cache when online) or a
    local folder (`config.json`, `model.safetensors`, `generation_config.json`, tokenizer files, `speech_tokenizer/`).
    A 12 Hz Base checkpoint (the ones that clone). Empty: this node serves no Qwen3-TTS on PyTorch; its voices are
    stored and refused with a 422."""

    qwen_max_chars: int = Field(300, ge=0)
    """Cap on the characters of one Qwen3-TTS generation (MLX and PyTorch): longer text is cut along sentences and
    the audio joined; 0 is unlimited."""

    qwen_max_tokens: int = Field(2048, ge=8, le=20_000)
    """Bound on the audio frames (12.5 per second) of one Qwen3-TTS generation (MLX and PyTorch); on PyTorch it is
    also the default and the ceiling of a request's `max_new_tokens`."""

    qwen_max_ref_seconds: float | None = Field(None, gt=0, le=120)
    """Qwen3-TTS's reference clips are trimmed to this many seconds before they are encoded (MLX and PyTorch).
    Unset: 15, or POLYTTS_VOXCPM_MAX_REF_SECONDS where that is set (what Qwen3-TTS read before; deprecated, read
    for this release only, with a warning in the log)."""

    mlx_qwen_model: str = "mlx-community/Qwen3-TTS-12Hz-1.7B-Base-8bit"
    """MLX runtime: Qwen3-TTS weights (hub id or local folder)."""

    def max_ref_seconds(self) -> float:
        """POLYTTS_QWEN_MAX_REF_SECONDS; unset, POLYTTS_VOXCPM_MAX_REF_SECONDS where it is set to other than its
        default (deprecated: with a warning in the log), else DEFAULT_MAX_REF_SECONDS."""
        if self.qwen_max_ref_seconds is not None:
            return self.qwen_max_ref_seconds
        # The family's share of the settings carries values, not which of them were set: VoxCPM's bound at its
        # default counts as unset.
        if self.voxcpm_max_ref_seconds != VoxCPMReferenceSettings.model_fields["voxcpm_max_ref_seconds"].default:
            log.warning(
                "Qwen3-TTS trims reference clips to POLYTTS_VOXCPM_MAX_REF_SECONDS (%gs) because "
                "POLYTTS_QWEN_MAX_REF_SECONDS is unset; that use of the VoxCPM variable is deprecated and ends with "
                "the next release: set POLYTTS_QWEN_MAX_REF_SECONDS",
                self.voxcpm_max_ref_seconds,
            )
            return self.voxcpm_max_ref_seconds
        return DEFAULT_MAX_REF_SECONDS
