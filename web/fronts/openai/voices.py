"""OpenAI's voice names as PolyTTS voices: the default mapping onto stock Kokoro voices, and the operator's overrides
(POLYTTS_OPENAI_VOICES). The OpenAI front's routes resolve names through the table (`voice_table`), and list it."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_VOICES: dict[str, str] = {
    # OpenAI's voices on stock Kokoro v1.0 packs, each by the voice's gender and accent. Where Kokoro ships a pack
    # named after the OpenAI voice (alloy, echo, fable, nova, onyx), that pack; the others on packs of the same kind
    # with the better grades in Kokoro's voice list.
    "alloy": "af_alloy",
    "ash": "am_michael",
    "ballad": "bm_george",
    "cedar": "am_fenrir",
    "coral": "af_heart",
    "echo": "am_echo",
    "fable": "bm_fable",
    "marin": "af_nicole",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "sage": "af_sarah",
    "shimmer": "af_bella",
    "verse": "am_puck",
}
"""OpenAI voice name -> the PolyTTS voice it speaks with; `voice_table` applies the operator's overrides."""


def voice_table(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The OpenAI voice names with the operator's overrides: each entry replaces a default or adds a name."""
    table = dict(DEFAULT_VOICES)
    for name, voice in (overrides or {}).items():
        if not (isinstance(name, str) and name.strip() and isinstance(voice, str) and voice.strip()):
            raise ValueError(f"voice table entry {name!r}: {voice!r} must map a name onto a voice, both non-empty")
        table[name.strip()] = voice.strip()
    return table
