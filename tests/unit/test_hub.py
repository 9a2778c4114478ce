"""Weights from a local folder or the hub cache, failing fast when the hub cannot be reached."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engines.base import EngineLoadError
from engines.hub import file_sha256, hub_reachable, resolve_model_folder, snapshot_revision


def test_unreachable_hub_is_detected_without_a_long_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # .invalid never resolves
    started = time.monotonic()
    assert hub_reachable(timeout=2.0) is False
    assert time.monotonic() - started < 3


def test_offline_and_not_cached_is_a_load_error_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EngineLoadError, match="POLYTTS_SOME_MODEL") as err:
        resolve_model_folder("someone/some-model", ["*.json"], "POLYTTS_SOME_MODEL")
    assert "offline" in err.value.message


def test_local_folders(tmp_path: Path) -> None:
    assert resolve_model_folder(str(tmp_path), ["*"], "X") == tmp_path
    with pytest.raises(EngineLoadError, match="does not exist"):
        resolve_model_folder(str(tmp_path / "nowhere"), ["*"], "POLYTTS_KOKORO_MODEL")
    assert snapshot_revision(tmp_path) is None
    snapshot = tmp_path / "snapshots" / "0123456789abcdef0123"
    snapshot.mkdir(parents=True)
    assert snapshot_revision(snapshot) == "0123456789abcdef0123"
    (tmp_path / "w.bin").write_bytes(b"abc")
    assert file_sha256(tmp_path / "w.bin") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
