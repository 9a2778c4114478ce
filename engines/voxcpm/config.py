"""What configures VoxCPM2: its node settings (`POLYTTS_*`, composed into the service's `Settings`) and the
parameters a request may set."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from engines.base import EngineParams, EngineSettings


class VoxCPMParams(EngineParams):
    """What a VoxCPM request may set."""

    cfg_value: float = Field(2.0, strict=True, ge=0.5, le=10.0, description="VoxCPM: guidance scale (default 2.0).")
    inference_timesteps: int = Field(
        10,
        strict=True,
        ge=1,
        le=100,
        description="VoxCPM: diffusion steps per patch (default 10); more is slower and finer.",
    )
    normalize: bool = Field(False, description="VoxCPM: normalise numbers and symbols first (default false).")
    denoise: bool = Field(
        False,
        description="VoxCPM: denoise the voice's prompt audio first (default false; needs POLYTTS_VOXCPM_DENOISER).",
    )


class VoxCPMReferenceSettings(EngineSettings):
    """The bound on VoxCPM's reference clips, a class of its own because Qwen3-TTS reads the same variable where
    POLYTTS_QWEN_MAX_REF_SECONDS is unset (deprecated, this release only): one variable, one field, one type and
    default, composed into both families' settings."""

    voxcpm_max_ref_seconds: float = Field(15.0, gt=0, le=120)
    """VoxCPM's reference and prompt clips are trimmed to this many seconds before they are encoded. (Qwen3-TTS
    reads it too where POLYTTS_QWEN_MAX_REF_SECONDS is unset, for this release only, and logs that it is
    deprecated.)"""


class VoxCPMSettings(VoxCPMReferenceSettings):
    """VoxCPM's node settings: weights, denoiser and the bounds of one generation."""

    voxcpm_model: str = "openbmb/VoxCPM2"
    """VoxCPM2 weights: a hub id (fetched into the hub cache when online) or a local folder (`config.json`,
    `model.safetensors`, `audiovae.safetensors`, tokenizer files)."""

    voxcpm_denoiser: Path | None = None
    """Local folder of the ZipEnhancer denoiser (needs `modelscope`). Unset: no denoiser, never downloaded, and a
    request with `denoise=true` is a 422."""

    voxcpm_max_chars: int = Field(80, ge=0)
    """Cap on the characters of one VoxCPM generation (quality drops on long ones); 0 is unlimited."""

    voxcpm_max_sentences: int = Field(3, ge=0)
    """Cap on the sentences of one VoxCPM generation; 0 is unlimited."""

    voxcpm_max_len: int = Field(2000, ge=4, le=20_000)
    """Bound on the audio tokens of one VoxCPM generation (the model stops earlier when it is done)."""

    mlx_voxcpm_model: str = "mlx-community/VoxCPM2-8bit"
    """MLX runtime: VoxCPM2 weights (hub id or local folder)."""
