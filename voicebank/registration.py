"""A voice registration as uploaded, and its validation in memory before anything is written.

A clip is decoded in full (a header alone can lie), its duration checked, and kept byte for byte when it is a WAV
file, else re-encoded as one; a pack is read by its family's pack format (`EngineSpec.packs`), never running pickled
code. Every refusal is a 4xx with a stable code, and the voice id comes out of the validation (`voicebank.ids` for a
clip, the family's own for a pack), checked against the one a bundle claims.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import soundfile as sf

from engines.base import EngineSpec, PackFormat
from errors import InvalidInput, PayloadTooLarge
from voicebank.ids import compute_voice_id
from voicebank.voice_entry import excerpt

MAX_REF_TEXT_CHARS = 2000

# Uploads libsndfile reads as a WAV file are kept byte for byte; anything else is re-encoded.
_WAV_FORMATS = frozenset({"WAV", "WAVEX"})


@dataclass(frozen=True)
class Registration:
    """What `POST /voices` carries, already read into memory: a reference clip, or a voice pack for Kokoro."""

    audio: bytes = field(repr=False)
    engine: str
    ref_text: str = ""
    x_vector_only_mode: bool = False
    seed_audio: bytes | None = field(default=None, repr=False)
    seed_text: str | None = None
    replace: bool = False
    voice_pack: bytes | None = field(default=None, repr=False)
    voice_pack_filename: str = ""
    language: str | None = None
    """The language the voice speaks (a canonical code): a request that names none follows it."""
    expected_id: str | None = None
    """The id the registration must come out as (an imported bundle's): anything else is refused, nothing written."""


@dataclass(frozen=True)
class Clip:
    """A validated upload: the bytes to store as a WAV file and what was measured."""

    wav: bytes = field(repr=False)
    duration_s: float
    sample_rate: int
    reencoded: bool
    """The upload was not a WAV file: `wav` is a re-encoding, and the id hashes the upload's own bytes."""


@dataclass(frozen=True)
class ClipVoice:
    """A clip registration that passed every check: its id, its texts as stored, its clip and its tone seed."""

    voice_id: str
    ref_text: str
    seed_text: str | None
    clip: Clip
    seed: Clip | None


@dataclass(frozen=True)
class PackVoice:
    """A pack registration that passed every check: its id, and the pack as the plain .npy file stored."""

    voice_id: str
    npy: bytes = field(repr=False)


class RegistrationChecks:
    """The checks a registration passes before anything is written, against the families' specs and the limits on
    uploads (POLYTTS_MAX_UPLOAD_BYTES, POLYTTS_VOICE_MIN_SECONDS, POLYTTS_VOICE_MAX_SECONDS)."""

    def __init__(
        self, families: Mapping[str, EngineSpec], max_upload_bytes: int, min_seconds: float, max_seconds: float
    ) -> None:
        self.families = families
        self.max_upload_bytes = max_upload_bytes
        self.min_seconds = min_seconds
        self.max_seconds = max_seconds

    def clip_voice(self, reg: Registration) -> ClipVoice:
        """A registration from a reference clip (and maybe a tone seed), checked in the order a user fixes it."""
        family = self._family(reg.engine)
        if not family.clones_from_clip:
            raise InvalidInput(
                f"engine {reg.engine!r} cannot clone a voice from a clip; it takes {family.accepts_instead}",
                code="engine_cannot_clone",
            )
        if (reg.seed_audio is not None or reg.seed_text) and not family.takes_seed:
            raise InvalidInput(
                f"engine {reg.engine!r} cannot take a tone seed (seed_audio, seed_text); register the voice from its "
                "clip and transcript alone",
                code="seed_not_supported",
            )
        self._check_size("audio", reg.audio)
        if reg.seed_audio is not None:
            self._check_size("seed_audio", reg.seed_audio)
        clip = self._decode("audio", reg.audio)
        seed = self._decode("seed_audio", reg.seed_audio) if reg.seed_audio is not None else None
        ref_text = reg.ref_text.strip()
        if not reg.x_vector_only_mode and not ref_text and not family.transcript_optional:
            raise InvalidInput(
                "ref_text (the transcript of the clip) is required unless x_vector_only_mode is on: "
                "a continuation prompt needs it",
                code="ref_text_required",
            )
        if reg.seed_text and reg.seed_audio is None:
            raise InvalidInput("seed_text was given without seed_audio", code="seed_text_without_audio")
        if reg.seed_audio is not None and not (reg.seed_text or "").strip():
            raise InvalidInput(
                "seed_audio needs its seed_text: the seed is a continuation prompt, which needs its transcript",
                code="seed_text_required",
            )
        if len(ref_text) > MAX_REF_TEXT_CHARS:
            raise InvalidInput(
                f"ref_text is {len(ref_text)} characters; at most {MAX_REF_TEXT_CHARS} are allowed",
                code="ref_text_too_long",
            )
        seed_text = reg.seed_text or None
        voice_id = _expected(
            reg, compute_voice_id(reg.audio, reg.engine, reg.x_vector_only_mode, reg.seed_audio, seed_text)
        )
        return ClipVoice(voice_id, ref_text, seed_text, clip, seed)

    def pack_voice(self, reg: Registration) -> PackVoice:
        """A registration from a style pack: read by the family's pack format, its id from its values."""
        assert reg.voice_pack is not None
        packs = self._packs(reg.engine)
        if reg.audio:
            raise InvalidInput("give either an 'audio' clip or a 'voice_pack', not both", code="audio_and_pack")
        self._check_size("voice_pack", reg.voice_pack)
        pack = packs.read(reg.voice_pack, reg.voice_pack_filename)
        voice_id = _expected(reg, packs.voice_id(pack))
        buffer = io.BytesIO()
        np.save(buffer, pack, allow_pickle=False)
        return PackVoice(voice_id, buffer.getvalue())

    def _packs(self, engine: str) -> PackFormat:
        """The pack format of a family whose voices are packs; a 422 for any other."""
        packs = self._family(engine).packs
        if packs is None:
            raise InvalidInput(
                f"engine {engine!r} takes no voice_pack; it clones from an 'audio' clip", code="engine_takes_no_pack"
            )
        return packs

    def _family(self, engine: str) -> EngineSpec:
        family = self.families.get(engine)
        if family is None:
            raise InvalidInput(
                f"unknown engine {excerpt(engine)!r}; known engines: {', '.join(sorted(self.families))}",
                code="unknown_engine",
            )
        return family

    def _check_size(self, name: str, data: bytes) -> None:
        if len(data) > self.max_upload_bytes:
            raise PayloadTooLarge(
                f"{name} is {len(data)} bytes; at most {self.max_upload_bytes} are accepted", code="audio_too_large"
            )

    def _decode(self, name: str, data: bytes) -> Clip:
        """Decode fully (a header alone can lie), check the duration, and produce the WAV bytes to store."""
        try:
            with sf.SoundFile(io.BytesIO(data)) as f:
                fmt = f.format
                samples = f.read(dtype="float32", always_2d=True)
                sample_rate = f.samplerate
        except (sf.SoundFileError, RuntimeError, ValueError) as exc:
            # libsndfile's own words, without the in-memory file's repr its message opens with
            reason = exc.error_string if isinstance(exc, sf.LibsndfileError) else str(exc)
            raise InvalidInput(f"{name} is not a readable audio file: {reason}", code="invalid_audio") from exc
        frames = samples.shape[0]
        if frames == 0:
            raise InvalidInput(f"{name} holds no audio frames", code="empty_audio")
        duration = frames / sample_rate
        if not self.min_seconds <= duration <= self.max_seconds:
            raise InvalidInput(
                f"{name} must last between {self.min_seconds:g} and {self.max_seconds:g} seconds; "
                f"it lasts {duration:.3f} s",
                code="audio_duration",
            )
        if fmt in _WAV_FORMATS:
            return Clip(wav=data, duration_s=duration, sample_rate=sample_rate, reencoded=False)
        out = io.BytesIO()
        sf.write(out, samples, sample_rate, format="WAV", subtype="PCM_16")
        return Clip(wav=out.getvalue(), duration_s=duration, sample_rate=sample_rate, reencoded=True)


def _expected(reg: Registration, voice_id: str) -> str:
    """The id a registration comes out as, checked against the one it claims (a bundle's) before anything is written."""
    if reg.expected_id is not None and reg.expected_id != voice_id:
        raise InvalidInput(
            f"the bundle claims voice {excerpt(reg.expected_id)} but its content is voice {voice_id}: "
            "tampered or damaged, refused",
            code="bundle_id_mismatch",
        )
    return voice_id
