"""The single GPU thread: every model call (load, voice preparation, generation, unload) runs on it.

Engines never see two threads and the event loop never blocks on model work. The thread runs one-off calls first
(loads, evictions), then one *step* from the attached step source (the scheduler's next job step)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("polytts.scheduler")

T = TypeVar("T")
Step = Callable[[], None]


class GpuThread:
    """One worker thread: one-off calls first, in order, then steps from the attached step source.

    When there is nothing to do it still asks the source every `tick_s`, so time-based decisions (a deadline, a
    reader gone idle) are taken without waiting for the next request."""

    def __init__(self, name: str = "polytts-gpu", tick_s: float = 1.0) -> None:
        self.tick_s = tick_s
        self._calls: collections.deque[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]]
        self._calls = collections.deque()
        self._wakeup = threading.Condition()
        self._source: Callable[[], Step | None] | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def attach(self, source: Callable[[], Step | None]) -> None:
        """`source` returns the next step to run, or None when no job can make progress."""
        self._source = source

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the work under way. The server waits for it (no timeout): native model code still running in a
        thread while the interpreter exits aborts the process, and a supervisor would see a crash, not a stop."""
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def wake(self) -> None:
        """Tell the thread there may be something new to do (a job, or room in a job's buffer)."""
        with self._wakeup:
            self._wakeup.notify()

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._wakeup:
            self._calls.append((future, fn, args))
            self._wakeup.notify()
        return future

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the GPU thread and await its result without blocking the loop."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the GPU thread and wait for its result, from a thread other than the GPU thread itself."""
        if threading.get_ident() == self.ident:
            return fn()
        return self.submit(fn).result()

    def _next(self) -> Callable[[], None] | None:
        with self._wakeup:
            while not self._stopping:
                if self._calls:
                    future, fn, args = self._calls.popleft()
                    return lambda: _settle(future, fn, args)
                step = self._source() if self._source is not None else None
                if step is not None:
                    return step
                self._wakeup.wait(self.tick_s)
        return None

    def _run(self) -> None:
        while (work := self._next()) is not None:
            try:
                work()
            except Exception:  # the one GPU thread must outlive any bug in a step
                log.exception("unexpected error on the GPU thread")


def _settle(future: concurrent.futures.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if future.set_running_or_notify_cancel():
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to the awaiting coroutine
            future.set_exception(exc)
