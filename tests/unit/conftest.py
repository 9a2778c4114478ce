"""Fixtures the unit tests of the cloning engines share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voicebank.registry import VoiceRegistry


@pytest.fixture
def registry(tmp_path: Path) -> VoiceRegistry:
    return VoiceRegistry(tmp_path / "voices")


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread, the more so on a shared machine."""
    import torch  # only the modules that ask for it need torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
