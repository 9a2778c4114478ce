"""The single GPU thread and the bounded queue of synthesis jobs in front of it.

Every model call (load, voice preparation, generation, unload) runs on one thread, so engines never see two
threads and the event loop never blocks on model work. Synthesis jobs run one step (one audio piece) at a time;
a cancelled job is dropped before its next step, so no model time is spent on audio nobody will receive.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from errors import Busy

log = logging.getLogger("polytts.scheduler")

T = TypeVar("T")
_STOP = object()


class GpuThread:
    """One worker thread running submitted callables in order."""

    def __init__(self, name: str = "polytts-gpu") -> None:
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self._tasks.put(_STOP)
            self._thread.join(timeout)

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._tasks.put((future, fn, args))
        return future

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the GPU thread and await its result without blocking the loop."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def _run(self) -> None:
        while (task := self._tasks.get()) is not _STOP:
            future, fn, args = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                future.set_exception(exc)


_DONE = object()


@dataclass
class Job:
    """One synthesis request: `steps` is created and consumed on the GPU thread, one audio piece per step."""

    engine: str
    chars: int
    steps: Callable[[], Iterator[np.ndarray]]
    loop: asyncio.AbstractEventLoop
    id: int = 0
    submitted_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None
    gpu_seconds: float = 0.0
    cancelled: threading.Event = field(default_factory=threading.Event)
    _out: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    def cancel(self) -> None:
        self.cancelled.set()

    def _deliver(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self._out.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancel()

    async def pieces(self) -> AsyncIterator[np.ndarray]:
        """Audio pieces as the GPU thread produces them; raises what the engine raised."""
        while (item := await self._out.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item


class Scheduler:
    """Admission (bounded in-flight jobs and waiting text) in front of the GPU thread, first come first served."""

    def __init__(self, gpu: GpuThread, *, max_inflight: int, max_queued_chars: int, retry_after: float) -> None:
        self.gpu = gpu
        self.max_inflight = max_inflight
        self.max_queued_chars = max_queued_chars
        self.retry_after = retry_after
        self._lock = threading.Lock()
        self._waiting: dict[int, Job] = {}
        self._running: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self.rejected = 0

    def submit(self, job: Job) -> Job:
        """Admit the job or raise Busy (429); decided at once, before any audio is sent."""
        with self._lock:
            inflight = len(self._waiting) + len(self._running)
            queued = sum(j.chars for j in self._waiting.values())
            if inflight >= self.max_inflight:
                reason = f"{inflight} syntheses in flight (limit {self.max_inflight})"
            elif self._waiting and queued + job.chars > self.max_queued_chars:
                reason = f"{queued} characters waiting (limit {self.max_queued_chars})"
            else:
                reason = ""
            if reason:
                self.rejected += 1
                raise Busy(f"server busy: {reason}; retry later", code="server_busy", retry_after=self.retry_after)
            job.id = next(self._ids)
            self._waiting[job.id] = job
        self.gpu.submit(self._run_job, job)
        return job

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "running": len(self._running),
                "waiting": len(self._waiting),
                "queued_chars": sum(j.chars for j in self._waiting.values()),
                "rejected": self.rejected,
            }

    def _run_job(self, job: Job) -> None:
        with self._lock:
            self._waiting.pop(job.id, None)
            self._running[job.id] = job
        job.started_at = time.perf_counter()
        steps: Iterator[np.ndarray] | None = None
        try:
            steps = job.steps()
            while not job.cancelled.is_set():
                began = time.perf_counter()
                piece = next(steps, None)
                job.gpu_seconds += time.perf_counter() - began
                if piece is None:
                    job._deliver(_DONE)
                    return
                job._deliver(piece)
            log.info("job %d cancelled before its next step", job.id)
        except Exception as exc:  # noqa: BLE001 - handed to the request
            job._deliver(exc)
        finally:
            if steps is not None and hasattr(steps, "close"):
                steps.close()
            with self._lock:
                self._running.pop(job.id, None)
