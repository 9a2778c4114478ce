"""The single GPU thread: every model call (load, voice preparation, generation, unload) runs on it.

Engines never see two threads and the event loop never blocks on model work. The thread runs one-off calls first
(loads, evictions), then one *step* from the attached step source (the scheduler's next job step).

The one exception is an engine whose steps may overlap (ONNX Runtime on a CPU node, `Step.alongside`): its steps
run on lanes, helper threads, while the GPU thread picks the next one, as many at once as the source hands out. A
one-off call still never overlaps a step: it waits until the lanes are idle, and no step starts meanwhile."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger("polytts.scheduler")

T = TypeVar("T")
MAX_LANES = 64
"""Lane threads at most; the step source decides how many steps overlap (one engine's steps at once)."""


@dataclass(frozen=True)
class Step:
    """One step the source hands out."""

    run: Callable[[], None]
    alongside: bool = False
    """Run it on a lane, so that the thread can pick another step meanwhile (an engine whose steps may overlap)."""


class GpuThread:
    """One worker thread: one-off calls first, in order, then steps from the attached step source.

    When there is nothing to do it still asks the source every `tick_s`, so time-based decisions (a deadline, a
    reader gone idle) are taken without waiting for the next request."""

    def __init__(self, name: str = "polytts-gpu", tick_s: float = 1.0) -> None:
        self.name = name
        self.tick_s = tick_s
        self._calls: collections.deque[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]]
        self._calls = collections.deque()
        self._wakeup = threading.Condition()
        self._woken = False
        """Something may have changed since the thread last looked (set by every notification)."""
        self._source: Callable[[], Step | None] | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._lanes: concurrent.futures.ThreadPoolExecutor | None = None
        self._on_lanes = 0
        """Steps running on lanes now."""

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
            self._notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def wake(self) -> None:
        """Tell the thread there may be something new to do (a job, or room in a job's buffer)."""
        with self._wakeup:
            self._notify()

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._wakeup:
            self._calls.append((future, fn, args))
            self._notify()
        return future

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the GPU thread and await its result without blocking the loop."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the GPU thread and wait for its result, from a thread other than the GPU thread itself."""
        if threading.get_ident() == self.ident:
            return fn()
        return self.submit(fn).result()

    @property
    def on_lanes(self) -> int:
        """Steps running on lanes now."""
        return self._on_lanes

    def _notify(self) -> None:
        self._woken = True
        self._wakeup.notify()

    def _next(self) -> Callable[[], None] | None:
        """The next work to run on this thread; steps that may overlap are handed to a lane instead. The step source
        is asked without holding the thread's lock: it takes its own, and what it calls may wake this thread."""
        while True:
            with self._wakeup:
                if self._stopping:
                    return None
                if self._calls and not self._on_lanes:  # a call never runs beside a step: the lanes idle first
                    future, fn, args = self._calls.popleft()
                    return lambda: _settle(future, fn, args)
                self._woken = False
                ask = not self._calls and self._source is not None
            step = self._source() if ask and self._source is not None else None
            with self._wakeup:
                if step is not None and not step.alongside:
                    return step.run
                if step is not None:
                    self._on_lanes += 1
                    self._lane_pool().submit(self._on_lane, step.run)
                elif not self._woken:
                    self._wakeup.wait(self.tick_s)

    def _lane_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._lanes is None:
            self._lanes = concurrent.futures.ThreadPoolExecutor(MAX_LANES, thread_name_prefix=f"{self.name}-lane")
        return self._lanes

    def _on_lane(self, run: Callable[[], None]) -> None:
        try:
            run()
        except Exception:  # as on the thread itself: a bug in a step must not stop the others
            log.exception("unexpected error on a lane of the GPU thread")
        finally:
            with self._wakeup:
                self._on_lanes -= 1
                self._notify()

    def _run(self) -> None:
        while (work := self._next()) is not None:
            try:
                work()
            except Exception:  # the one GPU thread must outlive any bug in a step
                log.exception("unexpected error on the GPU thread")
        if self._lanes is not None:
            self._lanes.shutdown(wait=True)  # the steps under way end before the thread does


def _settle(future: concurrent.futures.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if future.set_running_or_notify_cancel():
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to the awaiting coroutine
            future.set_exception(exc)
