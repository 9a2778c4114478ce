"""Voice bundles: one registration as a self-contained zip archive, so a voice can follow requests to any node.

A bundle holds what was registered, nothing derived (no prepared prompts): `manifest.json` (the id, engine, kind,
transcript, mode, seed text, language) and the clip and seed clip as they were uploaded, or the pack's values.
Content-addressed ids make a bundle verifiable anywhere: the importer registers it through the registry's own path
(validation, atomic write) with the id the manifest claims, and the registry refuses it before writing anything
unless its content hashes to that id.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from engines.tensor_files import read_zip_member
from errors import InvalidInput, PayloadTooLarge
from voicebank.ids import is_voice_id
from voicebank.registration import Registration
from voicebank.voice_entry import AUDIO_FILE, ORIGINAL_AUDIO_FILE, ORIGINAL_SEED_FILE, SEED_FILE, VoiceEntry

MEDIA_TYPE = "application/zip"
FORMAT = "polytts-voice-bundle"
VERSION = 1
MANIFEST = "manifest.json"
_MEMBERS = ("audio", "seed_audio", "voice_pack.npy")
_MAX_MANIFEST_BYTES = 64 * 1024


def export(entry: VoiceEntry) -> bytes:
    """The bundle of a registered voice (reads its files: call it off the event loop)."""
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "voice_id": entry.voice_id,
        "engine": entry.engine,
        "kind": entry.kind,
        "language": entry.language,
    }
    files: dict[str, bytes] = {}
    if entry.kind == "pack":
        assert entry.pack_path is not None
        files["voice_pack.npy"] = entry.pack_path.read_bytes()
    else:
        manifest |= {
            "ref_text": entry.ref_text,
            "x_vector_only_mode": entry.x_vector_only_mode,
            "seed_text": entry.seed_text,
        }
        files["audio"] = entry.uploaded(AUDIO_FILE, ORIGINAL_AUDIO_FILE).read_bytes()
        if entry.has_seed_audio:
            files["seed_audio"] = entry.uploaded(SEED_FILE, ORIGINAL_SEED_FILE).read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MANIFEST, json.dumps(manifest, ensure_ascii=False, indent=2))
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def registration(data: bytes, max_file_bytes: int) -> Registration:
    """The registration a bundle carries, claiming the manifest's id; 422 for anything malformed, 413 for a member
    that decompresses past `max_file_bytes` (counted as it is read, whatever the archive's header says)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = {info.filename: info for info in archive.infolist()}
            if MANIFEST not in names or set(names) - {MANIFEST, *_MEMBERS}:
                raise _bad(
                    f"a bundle holds {MANIFEST} and at most {', '.join(_MEMBERS)}; this one holds "
                    f"{', '.join(sorted(names))[:200]}"
                )
            manifest = _manifest(_read(archive, names[MANIFEST], _MAX_MANIFEST_BYTES))
            files = {name: _read(archive, info, max_file_bytes) for name, info in names.items() if name != MANIFEST}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError, ValueError) as exc:
        raise _bad(f"not a readable zip archive ({exc})") from None
    common = {"engine": manifest["engine"], "language": manifest.get("language"), "expected_id": manifest["voice_id"]}
    if manifest["kind"] == "pack":
        if "voice_pack.npy" not in files:
            raise _bad("a pack bundle needs voice_pack.npy")
        return Registration(
            audio=b"", voice_pack=files["voice_pack.npy"], voice_pack_filename="voice_pack.npy", **common
        )
    if "audio" not in files:
        raise _bad("a clip bundle needs its audio")
    return Registration(
        audio=files["audio"],
        ref_text=manifest.get("ref_text") or "",
        x_vector_only_mode=manifest.get("x_vector_only_mode") is True,
        seed_audio=files.get("seed_audio"),
        seed_text=manifest.get("seed_text"),
        **common,
    )


def _manifest(raw: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(f"{MANIFEST} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise _bad(f"{MANIFEST} is not a {FORMAT} version {VERSION}")
    if not isinstance(manifest.get("voice_id"), str) or not is_voice_id(manifest["voice_id"]):
        raise _bad(f"{MANIFEST} names no valid voice_id")
    if not isinstance(manifest.get("engine"), str) or manifest.get("kind") not in ("clip", "pack"):
        raise _bad(f"{MANIFEST} needs an engine and a kind (clip or pack)")
    for name in ("ref_text", "seed_text", "language"):
        if manifest.get(name) is not None and not isinstance(manifest[name], str):
            raise _bad(f"{MANIFEST} field {name!r} must be a string")
    return manifest


def _read(archive: zipfile.ZipFile, member: zipfile.ZipInfo, limit: int) -> bytes:
    if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _bad(f"{member.filename} uses a compression other than stored or deflated")
    try:
        return read_zip_member(archive, member, limit)
    except ValueError as exc:
        raise PayloadTooLarge(f"bundle member {member.filename} is too large: {exc}", code="audio_too_large") from None


def _bad(why: str) -> InvalidInput:
    return InvalidInput(f"invalid voice bundle: {why}", code="invalid_bundle")
