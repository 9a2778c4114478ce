"""Whether the step the current thread runs shares the machine with other steps (an engine that runs several at once,
on the GPU thread's lanes). The scheduler says so around each step; an engine that splits its threads between
overlapping steps (Kokoro on ONNX Runtime) reads it to choose how many threads the step gets."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_state = threading.local()


def beside() -> bool:
    """Whether the step running on this thread runs beside others (False outside a step, and for a step alone)."""
    return bool(getattr(_state, "beside", False))


@contextlib.contextmanager
def running(beside: bool) -> Iterator[None]:
    """Around one step on this thread: whether it runs beside others."""
    before = getattr(_state, "beside", False)
    _state.beside = beside
    try:
        yield
    finally:
        _state.beside = before
