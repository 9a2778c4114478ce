"""Stopping a step under way once nobody waits for its audio (its request was cancelled: the client went away, a
barge-in, a deadline, a drain).

The scheduler runs each step of a job `within` the job's `StepStop`; cancelling the job sets it, from whatever thread
cancels (the event loop). A backend whose runtime can stop a call from another thread (ONNX Runtime's
`RunOptions.terminate`) hooks that into the stop for the call's length (`on_stop`) and, when the stopped call fails,
raises `StepStopped`: the scheduler ends the job as cancelled, not as a failure. The engine is free again within
milliseconds instead of after the rest of a chunk nobody will hear.

This module imports nothing of the service: engines and the GPU layer both build on it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class StepStopped(Exception):
    """The step was stopped mid-call because its job was cancelled: the job ends as cancelled, the engine is fine."""


class StepStop:
    """Set once, when the job whose steps run within it is cancelled (the job's `cancelled` flag itself, read as a
    `threading.Event` is); hooks run when it is set (at once for one added after)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._hooks: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set = True
            hooks = list(self._hooks)
        for hook in hooks:
            hook()

    @contextlib.contextmanager
    def hooked(self, hook: Callable[[], None]) -> Iterator[None]:
        """`hook` runs if the stop is set while this block runs (at once if it already is)."""
        with self._lock:
            already = self._set
            if not already:
                self._hooks.append(hook)
        if already:
            hook()
        try:
            yield
        finally:
            with self._lock:
                if hook in self._hooks:
                    self._hooks.remove(hook)


_current = threading.local()


@contextlib.contextmanager
def within(stop: StepStop) -> Iterator[None]:
    """Around one step on this thread: the stop that ends it early."""
    before = getattr(_current, "stop", None)
    _current.stop = stop
    try:
        yield
    finally:
        _current.stop = before


def stopped() -> bool:
    """Whether the step running on this thread was stopped (False outside a step)."""
    stop: StepStop | None = getattr(_current, "stop", None)
    return stop is not None and stop.is_set()


@contextlib.contextmanager
def on_stop(hook: Callable[[], None]) -> Iterator[None]:
    """`hook` (stopping the call under way from another thread) runs if the step running on this thread is stopped
    while this block runs; outside a step it never does."""
    stop: StepStop | None = getattr(_current, "stop", None)
    if stop is None:
        yield
        return
    with stop.hooked(hook):
        yield
