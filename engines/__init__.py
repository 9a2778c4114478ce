"""Engine families the service knows by name, whether or not this node can run them.

Voices are portable: a registration names a family, and a node that cannot run it still stores the voice.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFamily:
    name: str
    clones_from_clip: bool
    """Whether a voice can be registered from a reference clip."""
    accepts_instead: str = ""
    """For families that cannot clone: what they take as a voice instead (shown in the 422)."""
    accepts_packs: bool = False
    """Whether a voice can be registered from an uploaded style pack (`voice_pack`)."""
    takes_seed: bool = False
    """Whether a cloned voice may carry a tone seed (`seed_audio` and `seed_text`)."""


FAMILIES: dict[str, EngineFamily] = {
    "kokoro": EngineFamily(
        "kokoro",
        clones_from_clip=False,
        accepts_instead=(
            "a built-in voice pack by name (listed by GET /voices, e.g. 'jf_alpha'), a blend such as "
            "'af_bella(2)+af_sky(1)', or an uploaded 'voice_pack' file (.pt, .npy, .npz or .safetensors)"
        ),
        accepts_packs=True,
    ),
    "voxcpm": EngineFamily("voxcpm", clones_from_clip=True, takes_seed=True),
    # Qwen3-TTS clones from the clip and its transcript (or the clip's speaker embedding) only.
    "qwen": EngineFamily("qwen", clones_from_clip=True),
}
