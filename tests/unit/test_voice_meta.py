"""`meta.json`: written byte for byte as earlier deployments wrote it, and read back with the leniency they need.

What a damaged file is refused for is tested through the registry (test_registry.py), which skips such a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.clips import wav_clip
from voicebank.meta import ClipMeta, PackMeta, Unusable, read_meta
from voicebank.registration import Registration
from voicebank.registry import VoiceRegistry


def _stored(entry_folder: Path) -> bytes:
    return (entry_folder / "meta.json").read_bytes()


def _as_earlier_deployments_wrote(meta: dict[str, Any]) -> bytes:
    return json.dumps(meta, ensure_ascii=False, indent=2).encode("utf-8")


def test_a_clip_meta_json_is_written_as_before(tmp_path: Path) -> None:
    reg = VoiceRegistry(tmp_path)
    entry, _ = reg.register(Registration(audio=wav_clip(1.0), engine="voxcpm", ref_text=" 你好, world "))
    written = _stored(entry.folder)
    assert written == _as_earlier_deployments_wrote(
        {
            "voice_id": entry.voice_id,
            "engine": "voxcpm",
            "ref_text": "你好, world",
            "x_vector_only_mode": False,
            "seed_text": None,
            "created_at": json.loads(written)["created_at"],
            "duration_s": 1.0,
            "sample_rate": 16_000,
        }
    )
    seeded, _ = reg.register(
        Registration(
            audio=wav_clip(1.5), engine="voxcpm", ref_text="hi", seed_audio=wav_clip(1.0, 330.0), seed_text="seed"
        )
    )
    assert _stored(seeded.folder) == _as_earlier_deployments_wrote(
        {
            "voice_id": seeded.voice_id,
            "engine": "voxcpm",
            "ref_text": "hi",
            "x_vector_only_mode": False,
            "seed_text": "seed",
            "created_at": json.loads(_stored(seeded.folder))["created_at"],
            "duration_s": 1.5,
            "sample_rate": 16_000,
        }
    )


def test_a_language_is_written_last_and_only_when_given(tmp_path: Path) -> None:
    reg = VoiceRegistry(tmp_path)
    entry, _ = reg.register(Registration(audio=wav_clip(), engine="qwen", x_vector_only_mode=True, language="de"))
    written = json.loads(_stored(entry.folder))
    assert list(written) == [
        "voice_id",
        "engine",
        "ref_text",
        "x_vector_only_mode",
        "seed_text",
        "created_at",
        "duration_s",
        "sample_rate",
        "language",
    ]
    assert written["language"] == "de" and written["x_vector_only_mode"] is True and written["ref_text"] == ""


def test_a_pack_meta_json_is_written_as_before(tmp_path: Path) -> None:
    pack = np.random.default_rng(5).standard_normal((510, 1, 256)).astype(np.float32)
    buffer = tmp_path / "v.npy"
    np.save(buffer, pack)
    reg = VoiceRegistry(tmp_path / "voices")
    entry, _ = reg.register(
        Registration(audio=b"", engine="kokoro", voice_pack=buffer.read_bytes(), voice_pack_filename="v.npy")
    )
    written = _stored(entry.folder)
    assert written == _as_earlier_deployments_wrote(
        {
            "voice_id": entry.voice_id,
            "engine": "kokoro",
            "kind": "pack",
            "created_at": json.loads(written)["created_at"],
        }
    )
    with_language = PackMeta(voice_id=entry.voice_id, engine="kokoro", created_at=1.5, language="en")
    assert with_language.to_json() == _as_earlier_deployments_wrote(
        {"voice_id": entry.voice_id, "engine": "kokoro", "kind": "pack", "created_at": 1.5, "language": "en"}
    )


def _folder(tmp_path: Path, meta: dict[str, Any]) -> Path:
    folder = tmp_path / "0123456789abcdef"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


def test_nulls_and_the_legacy_transcript_name_read_as_earlier_deployments_meant(tmp_path: Path) -> None:
    meta = read_meta(_folder(tmp_path, {"engine": "voxcpm", "text": "hi", "x_vector_only_mode": None, "kind": "clip"}))
    assert meta == ClipMeta(engine="voxcpm", ref_text="hi")
    assert meta.created_at is None and meta.duration_s is None and meta.language is None


def test_fields_of_the_other_shape_are_not_checked(tmp_path: Path) -> None:
    pack = read_meta(_folder(tmp_path, {"engine": "kokoro", "kind": "pack", "ref_text": 5, "sample_rate": "x"}))
    assert isinstance(pack, PackMeta) and pack.engine == "kokoro"
    clip = read_meta(_folder(tmp_path / "b", {"engine": "voxcpm", "ref_text": "kept", "text": 5}))
    assert isinstance(clip, ClipMeta) and clip.ref_text == "kept"


@pytest.mark.parametrize(
    "meta",
    [{"engine": "voxcpm", "sample_rate": 24_000.5, "voice_id": None}, {"engine": "voxcpm", "kind": None}],
    ids=["a null voice_id belongs to no voice", "a null kind is no kind"],
)
def test_a_present_but_null_voice_id_or_kind_is_refused(tmp_path: Path, meta: dict[str, Any]) -> None:
    with pytest.raises(Unusable):
        read_meta(_folder(tmp_path, meta))
