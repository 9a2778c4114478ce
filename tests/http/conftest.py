"""Fixtures of the in-process HTTP tier: the service in this process, and a client of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    """One app per test module, on the embedded Kokoro ONNX default."""
    with InProcessApp(tmp_path_factory.mktemp("app")) as running:
        yield running


@pytest.fixture
def client(app: InProcessApp) -> TestClient:
    return app.client
