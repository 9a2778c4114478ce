"""The systemd user unit and the launchd agent in deploy/: their documented install edits, applied to temporary
copies exactly as documented, give units that point at this checkout and give run.sh time to drain on stop."""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.servers import ROOT

UNIT = ROOT / "deploy" / "polytts.service"
PLIST = ROOT / "deploy" / "com.polytts.server.plist"
SHUTDOWN_MARGIN_S = 10  # beyond the drain: uvicorn's own shutdown, run.sh's exit, the engines' unload


def documented_install(path: Path) -> list[str]:
    """The install commands the file's own header gives, from `install:` up to `start:`; the test runs exactly these,
    less the one that asks the service manager to reload (no manager runs here)."""
    header = [line.strip().lstrip("#").strip() for line in path.read_text().splitlines()]
    start = next(i for i, line in enumerate(header) if line.startswith("install:"))
    end = next(i for i, line in enumerate(header) if line.startswith("start:"))
    commands = [header[start].removeprefix("install:").strip(), *header[start + 1 : end]]
    return [c for c in commands if not c.startswith(("systemctl", "launchctl"))]


def install(path: Path, home: Path) -> Path:
    """Run the documented install commands in the checkout with HOME=home; return the file they wrote."""
    commands = documented_install(path)
    copy = [c for c in commands if re.match(rf"sed .* deploy/{re.escape(path.name)} > ", c)]
    assert len(copy) == 1, f"{path.name} must document one sed line that writes the installed copy"
    for command in commands:
        subprocess.run(["bash", "-c", command], cwd=ROOT, env={**os.environ, "HOME": str(home)}, check=True)
    target = Path(copy[0].rsplit(">", 1)[1].strip().replace("~", str(home)))
    assert target.is_file()
    return target


def unit_settings(text: str) -> list[tuple[str, str]]:
    """(key, value) of each setting line, in order; a key may repeat (Environment)."""
    return [
        tuple(part.strip() for part in line.split("=", 1))  # type: ignore[misc]
        for line in text.splitlines()
        if "=" in line and not line.lstrip().startswith(("#", ";", "["))
    ]


def drain_budget(environment: dict[str, str]) -> float:
    assert "POLYTTS_DRAIN_SECONDS" in environment, "the unit must pin the drain budget its stop timeout is sized for"
    return float(environment["POLYTTS_DRAIN_SECONDS"])


# --- systemd -------------------------------------------------------------------------------------------------------


def test_unit_names_the_checkout_only_where_documented_and_stops_by_draining() -> None:
    settings = unit_settings(UNIT.read_text())
    values = dict(settings)
    paths = {key: value for key, value in settings if "/" in value}
    assert paths == {"WorkingDirectory": "%h/polytts", "ExecStart": "%h/polytts/run.sh"}
    edit_marks = re.findall(r"# EDIT: .*\n(\w+)=", UNIT.read_text())
    assert sorted(edit_marks) == sorted(paths), "every path is marked EDIT"

    environment = dict(value.split("=", 1) for key, value in settings if key == "Environment")
    assert values["KillMode"] == "mixed"  # SIGTERM to run.sh only; it forwards one signal to the server
    assert values["KillSignal"] == "SIGTERM"
    assert float(values["TimeoutStopSec"]) >= drain_budget(environment) + SHUTDOWN_MARGIN_S
    assert values["Restart"] == "on-failure"  # run.sh exits 0 after a clean stop


@pytest.fixture
def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is absent: `apt-get install -y systemd` (Debian/Ubuntu) to verify the unit")
    return found


def verify(systemd_analyze: str, unit: Path, home: Path) -> subprocess.CompletedProcess[str]:
    # A user manager needs a runtime directory; as root in a container there is none unless given.
    runtime = home / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_COLOR": "0"}
    return subprocess.run(
        [systemd_analyze, "--user", "verify", str(unit)], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_documented_install_gives_a_unit_systemd_verifies(systemd_analyze: str, tmp_path: Path) -> None:
    unit = install(UNIT, tmp_path)
    assert unit == tmp_path / ".config" / "systemd" / "user" / "polytts.service"
    values = dict(unit_settings(unit.read_text()))
    assert values["WorkingDirectory"] == str(ROOT)
    assert values["ExecStart"] == f"{ROOT}/run.sh"
    result = verify(systemd_analyze, unit, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "" and result.stdout.strip() == ""  # not even a warning


def test_without_the_edit_systemd_names_the_missing_run_sh(systemd_analyze: str, tmp_path: Path) -> None:
    """As shipped, the unit expects ~/polytts; elsewhere the check fails and says which path to fix."""
    unit = tmp_path / "polytts.service"
    shutil.copy(UNIT, unit)
    result = verify(systemd_analyze, unit, tmp_path)
    assert result.returncode != 0
    assert f"{tmp_path}/polytts/run.sh" in result.stderr


# --- launchd -------------------------------------------------------------------------------------------------------


def string_values(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in string_values(value)]
    if isinstance(node, list):
        return [s for value in node for s in string_values(value)]
    return []


def test_plist_names_paths_only_where_documented_and_stops_by_draining() -> None:
    agent = plistlib.loads(PLIST.read_bytes())
    paths = [s for s in string_values(agent) if "/" in s]
    assert paths and all(p.startswith("/Users/USERNAME/") for p in paths), paths
    header = PLIST.read_text().split("<plist", 1)[0]
    for key in ("ProgramArguments", "WorkingDirectory", "StandardOutPath", "StandardErrorPath"):
        assert key in header, f"the header must say that {key} names a path"
    assert drain_budget(agent["EnvironmentVariables"]) + SHUTDOWN_MARGIN_S <= agent["ExitTimeOut"]
    assert agent["KeepAlive"] == {"SuccessfulExit": False} and agent["RunAtLoad"] is True


def test_the_documented_install_gives_a_plist_for_this_checkout(tmp_path: Path) -> None:
    home = tmp_path / "home"
    installed = install(PLIST, home)
    assert installed == home / "Library" / "LaunchAgents" / "com.polytts.server.plist"
    agent = plistlib.loads(installed.read_bytes())
    assert agent["Label"] == "com.polytts.server" == installed.stem
    assert agent["ProgramArguments"] == [f"{ROOT}/run.sh"] and os.access(agent["ProgramArguments"][0], os.X_OK)
    assert agent["WorkingDirectory"] == str(ROOT)
    assert agent["StandardOutPath"] == agent["StandardErrorPath"] == f"{home}/Library/Logs/polytts.log"
    assert "USERNAME" not in installed.read_text().split("<plist", 1)[1]
