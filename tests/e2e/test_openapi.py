"""Schemathesis, run on the live schema against a real server, finds no 5xx and no answer that the schema does not
allow. (What /openapi.json says, and that the answers are the documented ones, is tested in this process, in
tests/http/test_openapi.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import PROBE
from tests.support.openapi import openapi_env, operations
from tests.support.servers import ROOT, ServerProcess

SCHEMATHESIS_EXAMPLES = 12
"""Examples per operation and phase: the whole run stays within a few minutes on two cores."""
SCHEMATHESIS_SEED = 20261130


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("openapi")
    proc = ServerProcess(tmp, **openapi_env(tmp))
    yield proc.start()
    proc.stop()


def test_schemathesis_finds_no_server_error_and_no_answer_the_schema_does_not_allow(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The checks and their settings are in tests/e2e/schemathesis.toml; the report lands in the test's folder."""
    report = tmp_path / "schemathesis.json"
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        "tests/e2e/schemathesis.toml",
        "--no-color",
        "run",
        f"{server.url}/openapi.json",
        "--max-examples",
        str(SCHEMATHESIS_EXAMPLES),
        "--seed",
        str(SCHEMATHESIS_SEED),
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis")}  # not in the checkout
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    summary = json.loads(report.read_text())
    assert (summary["failures"], summary["errors"], run.returncode) == ([], [], 0), run.stdout[-20_000:]
    assert summary["operations"]["tested"] == len(list(operations(PROBE.get(server.url + "/openapi.json").json())))
    assert summary["test_cases"]["generated"] > 500
