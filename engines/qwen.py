"""Qwen3-TTS voice cloning: the `qwen` engine family.

On the MLX runtime it runs through mlx-audio (engines/mlx_qwen.py); elsewhere this node stores `qwen` voices (voices
are portable) and answers 422 naming the engine when one is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from engines.base import Engine, EngineCaps, EngineParams, EngineSettings, EngineSpec
from runtime import uses_mlx

if TYPE_CHECKING:
    from settings import Settings


class QwenParams(EngineParams):
    """Qwen3-TTS takes no per-request parameters yet."""


class QwenSettings(EngineSettings):
    mlx_qwen_model: str = "mlx-community/Qwen3-TTS-12Hz-1.7B-Base-8bit"
    """MLX runtime: Qwen3-TTS weights (hub id or local folder)."""

    qwen_max_tokens: int = Field(2048, ge=8, le=20_000)
    """Bound on the audio frames (12.5 per second) of one Qwen3-TTS generation."""


def build(settings: Settings) -> Engine | None:
    if not uses_mlx(settings.runtime):
        return None
    from engines.mlx_qwen import MlxQwenEngine

    return MlxQwenEngine(
        model=settings.mlx_qwen_model,
        cache_mb=settings.mlx_cache_mb,
        max_voices=settings.max_voices_mem,
        max_ref_seconds=settings.voxcpm_max_ref_seconds,
        max_tokens=settings.qwen_max_tokens,
        stream_interval=settings.stream_interval,
        caps=EngineCaps(0, 300, 0, interleavable=False),
    )


SPEC = EngineSpec(family="qwen", clones_from_clip=True, params=QwenParams, settings=QwenSettings, build=build)
