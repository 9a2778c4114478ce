"""What configures CosyVoice: its node settings (`POLYTTS_*`, composed into the service's `Settings`) and the
parameters a request may set."""

from __future__ import annotations

from pydantic import Field

from engines.base import EngineParams, EngineSettings

MAX_INSTRUCT_CHARS = 4096
"""As long as the OpenAI route's `instructions` may be, which set it."""


class CosyVoiceParams(EngineParams):
    """What a CosyVoice request may set; the sampling defaults are those the CosyVoice 2 checkpoints ship
    (`cosyvoice2.yaml`: repetition-aware sampling, top_p 0.8, top_k 25, a window of 10 at ratio 0.1)."""

    instruct: str = Field(
        "",
        max_length=MAX_INSTRUCT_CHARS,
        description="CosyVoice: how to speak, in words (emotion, style, dialect, pace), e.g. '用开心的语气说' or "
        "'Speak slowly and calmly'; the voice's clip still gives the timbre. Empty (the default): none. On the "
        "OpenAI route, `instructions` sets it.",
    )
    cross_lingual: bool = Field(
        False,
        description="CosyVoice: take only the timbre from the voice's clip, not its speech (for text in another "
        "language than the clip's); x-vector-only voices always do. Default false.",
    )
    normalize: bool = Field(
        True,
        description="CosyVoice: read numbers and symbols out first (English by the service's normalizer, Chinese by "
        "CosyVoice's own frontend; default true).",
    )
    top_p: float = Field(0.8, strict=True, gt=0, le=1.0, description="CosyVoice: nucleus sampling (default 0.8).")
    top_k: int = Field(25, strict=True, ge=1, le=1000, description="CosyVoice: top-k sampling (default 25).")
    repetition_window: int = Field(
        10,
        strict=True,
        ge=1,
        le=100,
        description="CosyVoice: speech tokens looked back on for repetition (upstream's win_size, default 10).",
    )
    repetition_ratio: float = Field(
        0.1,
        strict=True,
        gt=0,
        le=1.0,
        description="CosyVoice: share of that window a sampled token may already fill before it is drawn again from "
        "the whole distribution (upstream's tau_r, default 0.1).",
    )


class CosyVoiceSettings(EngineSettings):
    """CosyVoice's node settings: weights and the bounds of one generation and of its reference clip."""

    cosyvoice_model: str = "FunAudioLLM/CosyVoice2-0.5B"
    """CosyVoice 2 weights: a hub id (fetched into the hub cache when online) or a local folder (`cosyvoice2.yaml`,
    `llm.pt`, `flow.pt`, `hift.pt`, `campplus.onnx`, `speech_tokenizer_v2.onnx`, `CosyVoice-BlankEN/`). Empty: this
    node serves no CosyVoice; its voices are stored and refused with a 422."""

    cosyvoice_max_chars: int = Field(120, ge=0)
    """Cap on the characters of one CosyVoice generation: longer text is cut along sentences and the audio joined (the
    official frontend cuts text at 80 tokens, about 100 Chinese characters or 300 English ones); 0 is unlimited."""

    cosyvoice_max_ref_seconds: float = Field(15.0, gt=0, le=30)
    """CosyVoice's reference clips are trimmed to this many seconds before they are encoded (its speech tokenizer
    takes at most 30). With POLYTTS_COSYVOICE_MAX_TOKENS it sets the peak memory the footprint is measured with."""

    cosyvoice_max_tokens: int = Field(1500, ge=50, le=6000)
    """Bound on the speech tokens (25 a second) of one CosyVoice generation: the audio is cut there, with a warning in
    the log (the LLM stops by itself long before on speech, and at 20 tokens per text token at the latest). The flow
    decodes the reference's tokens and all of these at once, so this bound and the reference's length set the peak
    memory, which the footprint is measured with on CUDA."""
