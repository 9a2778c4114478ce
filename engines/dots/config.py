"""What configures dots.tts: its node settings (`POLYTTS_*`, composed into the service's `Settings`) and the
parameters a request may set."""

from __future__ import annotations

from pydantic import Field

from engines.base import EngineParams, EngineSettings


class DotsParams(EngineParams):
    """What a dots.tts request may set (the package's own defaults). The fixed-step checkpoints (dots.tts-mf-2steps,
    -mf-1step, -mf-2steps-stts) sample as their config fixes: a request may leave num_steps and guidance_scale at the
    defaults or name the checkpoint's own values, nothing else."""

    num_steps: int = Field(
        10, strict=True, ge=1, le=64, description="dots.tts: flow-matching steps per audio patch (default 10)."
    )
    guidance_scale: float = Field(
        1.2, strict=True, ge=0, le=10, description="dots.tts: classifier-free guidance scale (default 1.2)."
    )
    speaker_scale: float = Field(
        1.5,
        strict=True,
        gt=0,
        le=5,
        description="dots.tts: weight of the voice's speaker embedding (x-vector) in the condition (default 1.5).",
    )


class DotsSettings(EngineSettings):
    """dots.tts's node settings: weights, precision, and the bounds of one generation and of its reference clip."""

    dots_model: str = "dots-studio/dots.tts-soar"
    """dots.tts weights: a hub id (fetched into the hub cache when online) or a local folder (`config.json`,
    `llm_config.json`, `latent_stats.pt`, `model.safetensors`, `vocoder.safetensors`, `speaker_encoder.safetensors`,
    tokenizer files). Any released TTS checkpoint: dots-studio/dots.tts-soar (best similarity), -base, -mf (fewer
    steps), -mf-2steps, -mf-1step, or -mf-2steps-stts with POLYTTS_DOTS_DOUBLE_STREAMING. Empty: this node serves no
    dots.tts; its voices are stored and refused with a 422."""

    dots_double_streaming: bool = False
    """Speak through dots.tts's double-streaming session (the text fed in token by token, audio out as it goes),
    the path dots-studio/dots.tts-mf-2steps-stts is trained for; off, through `generate_stream`, the path of every
    other checkpoint."""

    dots_max_chars: int = Field(200, ge=0)
    """Cap on the characters of one dots.tts generation: longer text is cut along sentences and the audio joined; 0
    is unlimited. 200 characters keep one generation's audio (about 45 s of Chinese, 15 s of English) within
    POLYTTS_DOTS_MAX_PATCHES next to a reference of POLYTTS_DOTS_MAX_REF_SECONDS."""

    dots_max_patches: int = Field(500, ge=8, le=512)
    """Audio patches (160 ms each on the released checkpoints) one dots.tts generation may hold, the reference's
    included on the continuation path; the package's own default, and at most its largest bucket (512)."""

    dots_max_ref_seconds: float = Field(30.0, gt=0, le=60)
    """dots.tts's reference clips are cut to this many seconds before they are encoded. The longest reference sets
    the peak memory (a continuation voice encodes its whole clip), so the footprint is measured with one this long;
    it must leave at least a quarter of POLYTTS_DOTS_MAX_PATCHES to the speech generated."""

    dots_optimize: bool = False
    """CUDA only: the package's optimized inference (torch.compile, static caches, merged vocoder steps), with its
    warm-up at load (minutes on a real checkpoint)."""
