"""The one durable-write helper: what it writes is on disk in full before it returns, and a rename is synced in its
folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import durable


def test_bytes_or_parts_are_written_in_full_and_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert durable.write_synced(tmp_path / "one", b"abc") == 3
    assert durable.write_synced(tmp_path / "two", iter([b"ab", b"", b"cde"])) == 5
    assert (tmp_path / "one").read_bytes() == b"abc" and (tmp_path / "two").read_bytes() == b"abcde"
    assert len(synced) == 2


def test_a_rename_replaces_the_target_and_syncs_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "target").write_bytes(b"old")
    durable.write_synced(tmp_path / "target.tmp", b"new")
    folders: list[Path] = []
    monkeypatch.setattr(durable, "fsync_dir", folders.append)
    durable.replace_synced(tmp_path / "target.tmp", tmp_path / "target")
    assert (tmp_path / "target").read_bytes() == b"new" and not (tmp_path / "target.tmp").exists()
    assert folders == [tmp_path]
