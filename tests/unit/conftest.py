"""Fixtures unit tests share: a voice registry and one torch thread (the cloning engines), an event loop object
(the fair queue's jobs)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from voicebank.registry import VoiceRegistry


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop object for Job.loop; FairQueue never touches it."""
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


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
