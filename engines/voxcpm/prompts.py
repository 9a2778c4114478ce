"""How a registered voice maps onto VoxCPM2's two prompts, alike on PyTorch and on MLX:

- the clip is always the *reference* prompt (`reference_wav_path`): it carries the timbre;
- the *continuation* prompt (`prompt_wav_path` + `prompt_text`) sets tone and prosody: the seed clip and its text
  when the voice has a seed, else the clip itself and its transcript;
- x-vector-only mode uses the reference alone (no transcript needed); a seed still adds its continuation prompt.

The registry refuses, at registration, a continuation that would have no transcript.
"""

from __future__ import annotations

from pathlib import Path

from voicebank.voice_entry import VoiceEntry


def prompt_sources(voice: VoiceEntry) -> tuple[Path, Path | None, str | None]:
    """(reference clip, continuation clip, continuation text) for a voice, as the module docstring maps them."""
    if voice.seed_path is not None:
        return voice.audio_path, voice.seed_path, voice.seed_text
    if not voice.x_vector_only_mode:
        return voice.audio_path, voice.audio_path, voice.ref_text
    return voice.audio_path, None, None
