"""A clock for the fair queue's tests: time moves only when the test says so."""

from __future__ import annotations


class Clock:
    """A clock that only moves when the test says so."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
