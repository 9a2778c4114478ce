"""Waiting for a state with a deadline: the one polling loop of the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL_S = 0.05


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = INTERVAL_S,
    detail: Callable[[], object] | None = None,
) -> T:
    """Call `predicate` until it returns something truthy, and return that; fail the test after `timeout` seconds,
    saying `what` it waited for (and `detail()`, a log or the last state seen, when given). An exception the
    predicate raises ends the wait at once: a probe that sees the awaited state can no longer come (a process that
    exited) says so itself."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout}s waiting for {what}"
            raise AssertionError(message if detail is None else f"{message}\n{detail()}")
        time.sleep(interval)
