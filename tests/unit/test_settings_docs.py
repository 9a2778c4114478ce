"""docs/settings.md and docs/errors.md are what `python -m docs.generate` makes of the code today: a setting or an
error code changed without its reference fails here, with the command that refreshes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import AliasChoices, Field

from docs import generate
from engines.base import EngineSettings
from errors import ERRORS
from settings import Settings


def test_the_generated_references_are_current() -> None:
    assert generate.stale() == [], f"docs/ is stale: run `{generate.REFRESH}` and commit what it writes"


def test_every_setting_is_documented_with_its_variable_and_default() -> None:
    reference = generate.settings_reference()
    for name in Settings.model_fields:
        assert f"`POLYTTS_{name.upper()}`" in reference or Settings.model_fields[name].validation_alias, name
    assert "- **`POLYTTS_PORT`** (`int`, at least 1, at most 65,535, default `8100`). TCP port" in reference
    assert "**`POLYTTS_VOICES_DIR`** (`Path`, default `<checkout>/voices`)" in reference  # no path of this machine
    assert str(Path.cwd()) not in reference


def test_each_engine_familys_settings_have_their_own_section() -> None:
    reference = generate.settings_reference()
    sections = [line for line in reference.splitlines() if line.startswith("## ")]
    assert sections[0] == "## The service: `settings.ServiceSettings`"
    assert sections[1] == "## Scheduling: `gpu.scheduling_settings.SchedulingSettings`"
    assert sections[2] == "## Jobs: `jobs.job_settings.JobSettings`"
    assert [section.split(":")[0] for section in sections[3:]] == [
        "## Engine `kokoro`",
        "## Engine `voxcpm`",
        "## Engine `qwen`",
        "## Engines `voxcpm` and `qwen`",  # VoxCPM's bound on reference clips, which Qwen3-TTS reads too
        "## Engine `dots`",
        "## Engine `cosyvoice`",
    ]
    kokoro = reference.index("## Engine `kokoro`")
    assert reference.index("`POLYTTS_KOKORO_BACKEND`") > kokoro > reference.index("`POLYTTS_PORT`")


def test_each_variable_is_one_setting() -> None:
    """A variable read by two fields would be listed twice, with two types and defaults, for one setting."""
    entries = re.findall(r"^- \*\*(.+?)\*\* \(", generate.settings_reference(), re.MULTILINE)
    variables = [variable for entry in entries for variable in entry.split(", ")]
    assert len(variables) > 50
    assert sorted({variable for variable in variables if variables.count(variable) > 1}) == []


class _Documented(EngineSettings):
    """Settings of a test."""

    level: int = Field(3, ge=1, le=5)
    """How much, 1 to 5; see <here>."""

    renamed: str = Field("x", validation_alias=AliasChoices("polytts_renamed", "polytts_old_name"))
    """Read from either variable."""


class _Undocumented(EngineSettings):
    """Settings of a test, one without its docstring."""

    silent: bool = False


def test_entries_come_from_the_fields_docstrings() -> None:
    reference = generate.settings_reference(_Documented)
    assert "- **`POLYTTS_LEVEL`** (`int`, at least 1, at most 5, default `3`). How much, 1 to 5; see &lt;here>." in (
        reference
    )
    assert "- **`POLYTTS_RENAMED`, `POLYTTS_OLD_NAME`** (`str`, default `x`). Read from either variable." in reference
    with pytest.raises(ValueError, match="_Undocumented.silent has no docstring"):
        generate.settings_reference(_Undocumented)


def test_the_error_reference_lists_every_code() -> None:
    reference = generate.errors_reference()
    for code, entry in ERRORS.items():
        status = entry.status if entry.status is not None else "the framework's"
        assert f"| `{code}` | {status} | {entry.meaning} |" in reference


def test_check_exits_nonzero_when_a_file_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate, "DOCS", tmp_path)
    assert generate.main(["--check"]) == 1
    assert generate.main([]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["errors.md", "settings.md"]
    assert generate.main(["--check"]) == 0
