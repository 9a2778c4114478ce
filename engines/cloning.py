"""What the engines that clone from a registered clip share: taking a voice as a clip, and the key its prepared
artefacts are kept under in memory."""

from __future__ import annotations

from engines.base import VoiceRef
from errors import InvalidInput
from voicebank.voice_entry import VoiceEntry


def cloned_voice(voice: VoiceRef, engine: str) -> VoiceEntry:
    """`voice` as the registered clip it must be; anything else is refused in the words of `engine`, the family's
    display name (e.g. "VoxCPM")."""
    if not isinstance(voice, VoiceEntry) or voice.kind != "clip":
        raise InvalidInput(f"{engine} clones from a registered clip; {voice!r} is not one", code="wrong_engine")
    return voice


def prepared_key(voice: VoiceEntry) -> str:
    """Names a voice's prepared prompt in memory: a voice registered again under the same id is prepared again."""
    return f"{voice.voice_id}@{voice.created_at}"
