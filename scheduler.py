"""The single GPU thread, and the weighted fair queue of synthesis jobs in front of it.

Every model call (load, voice preparation, generation, unload) runs on one thread, so engines never see two threads
and the event loop never blocks on model work. The thread runs one-off calls first (loads, evictions), then one
*step* of the job the fair queue picks: one text chunk, whose audio pieces are handed over as they are produced.
A chunk is also one whole generation of engines that cannot interleave (VoxCPM's single KV cache), so two
generations never share a model.

Fairness: each job belongs to a key (its API key's name, its `X-Fairness-Key`, or the anonymous key). The next step
goes to the key with the least GPU time used divided by its configured weight; a key's jobs keep their order. A key
that becomes busy starts level with the least-served busy key (no credit for having been idle), and a key's used
time is forgotten once it has been idle for `idle_state_ttl_s`. While one engine is resident, the resident engine
keeps the thread as long as it has work, until another engine's oldest request has waited `engine_switch_max_wait_s`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from errors import Busy, ServiceError

log = logging.getLogger("polytts.scheduler")

T = TypeVar("T")
Step = Callable[[], None]
_DONE = object()


class GpuThread:
    """One worker thread: one-off calls first, in order, then steps from the attached step source."""

    def __init__(self, name: str = "polytts-gpu") -> None:
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

    def stop(self) -> None:
        """Stop after the work under way. Waits for it: native model code still running in a thread while the
        interpreter exits aborts the process (and a supervisor would see a crash, not a clean stop)."""
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify()
        if self._thread.is_alive():
            self._thread.join()

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
                self._wakeup.wait()
        return None

    def _run(self) -> None:
        while (work := self._next()) is not None:
            try:
                work()
            except Exception:  # noqa: BLE001 - the one GPU thread must outlive any bug in a step
                log.exception("unexpected error on the GPU thread")


def _settle(future: concurrent.futures.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if future.set_running_or_notify_cancel():
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            future.set_exception(exc)


class JobCancelled(ServiceError):
    """The job was dropped before it finished: its client went away or it ran past its deadline."""

    status = 504
    code = "request_timeout"


@dataclass(eq=False)
class Job:
    """One synthesis request. `steps` is created and consumed on the GPU thread: each item it yields is one step,
    an iterator of audio pieces."""

    engine: str
    chars: int
    steps: Callable[[], Iterator[Iterator[np.ndarray]]]
    loop: asyncio.AbstractEventLoop
    key: str = "anonymous"
    deadline: float | None = None
    """time.monotonic() after which the job is dropped before its next step."""
    id: int = 0
    submitted_at: float = field(default_factory=time.perf_counter)
    enqueued_at: float = 0.0
    last_served_at: float | None = None
    """FairQueue clock time of the job's last step: how long it has waited since is what the engine switch bound
    measures."""
    started_at: float | None = None
    ready: Callable[[], bool] | None = None
    """For a job whose steps come as its input arrives (a live request): whether it has one to take now. A job
    that has none is passed over: waiting for text holds no step of the GPU thread."""
    units_total: int | None = None
    """Steps the job will take, when known: the last one then also ends the job, without another turn."""
    units_done: int = 0
    gpu_seconds: float = 0.0
    delivered: int = 0
    consumed: int = 0
    cancel_reason: str | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    _units: Iterator[Iterator[np.ndarray]] | None = None
    _out: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    _on_consumed: Callable[[], None] = lambda: None

    def cancel(self, reason: str = "client disconnected") -> None:
        if not self.cancelled.is_set():
            self.cancel_reason = reason
            self.cancelled.set()
            self._on_consumed()  # a job parked on a full buffer must be seen, and dropped

    @property
    def buffered(self) -> int:
        return self.delivered - self.consumed

    def _deliver(self, item: Any) -> None:
        self.delivered += 1
        try:
            self.loop.call_soon_threadsafe(self._out.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancel("server stopping")

    async def pieces(self) -> AsyncIterator[np.ndarray]:
        """Audio pieces as the GPU thread produces them; raises what the engine raised."""
        while True:
            item = await self._out.get()
            self.consumed += 1
            self._on_consumed()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


@dataclass
class FairnessPolicy:
    default_weight: float = 1.0
    weights: dict[str, float] = field(default_factory=dict)
    idle_state_ttl_s: float = 300.0
    max_pending_per_key: int = 8
    max_pending_per_engine: int = 32
    engine_switch_max_wait_s: float = 5.0
    max_buffered_pieces: int = 8
    max_inflight: int = 64
    max_queued_chars: int = 100_000
    retry_after: float = 2.0

    def __post_init__(self) -> None:
        if not self.default_weight > 0 or any(not weight > 0 for weight in self.weights.values()):
            raise ValueError("every fairness weight must be above 0")

    def weight(self, key: str) -> float:
        return self.weights.get(key, self.default_weight)


@dataclass
class KeyState:
    jobs: collections.deque[Job] = field(default_factory=collections.deque)
    used: float = 0.0
    """GPU seconds used (forgotten after idle_state_ttl_s idle)."""
    virtual: float = 0.0
    """Used time divided by weight: the key with the least goes next."""
    last_active: float = 0.0
    last_served: float = 0.0
    rejected: int = 0


class FairQueue:
    """Which job steps next. Pure bookkeeping: no threads, a clock that tests can drive."""

    def __init__(self, policy: FairnessPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self.keys: dict[str, KeyState] = {}
        self.rejected_by_engine: collections.Counter[str] = collections.Counter()
        self.rejected_total = 0
        # The least weighted service any busy key had when a step was last picked; it never goes down. A key that
        # becomes busy starts here, so neither idle time nor arriving in another key's gap buys it credit.
        self.floor = 0.0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def add(self, job: Job) -> Job:
        """Admit a job, or raise Busy (429) naming the bound it hit."""
        policy = self.policy
        with self._lock:
            now = self.clock()
            self._expire(now)
            jobs = [j for state in self.keys.values() for j in state.jobs]
            state = self.keys.get(job.key)
            pending_key = len(state.jobs) if state else 0
            pending_engine = sum(j.engine == job.engine for j in jobs)
            waiting_chars = sum(j.chars for j in jobs if j.started_at is None)
            if pending_key >= policy.max_pending_per_key:
                reason, code = f"key {job.key!r} has {pending_key} requests pending", "fairness_key_queue_full"
            elif pending_engine >= policy.max_pending_per_engine:
                reason, code = f"engine {job.engine!r} has {pending_engine} requests pending", "engine_queue_full"
            elif len(jobs) >= policy.max_inflight:
                reason, code = f"{len(jobs)} syntheses in flight", "server_busy"
            elif waiting_chars and waiting_chars + job.chars > policy.max_queued_chars:
                reason, code = f"{waiting_chars} characters waiting", "server_busy"
            else:
                reason = code = ""
            if reason:
                self.rejected_total += 1
                self.rejected_by_engine[job.engine] += 1
                self.keys.setdefault(job.key, KeyState(last_active=now)).rejected += 1
                raise Busy(f"server busy: {reason}; retry later", code=code, retry_after=policy.retry_after)
            if state is None:
                state = self.keys[job.key] = KeyState()
            if not state.jobs:  # becoming busy: level with the least-served busy key, no credit for idle time
                busy = [s.virtual for s in self.keys.values() if s.jobs]
                state.virtual = max(state.virtual, self.floor, min(busy, default=0.0))
            state.last_active = now
            job.id = next(self._ids)
            job.enqueued_at = now
            state.jobs.append(job)
        return job

    def remove(self, job: Job) -> None:
        with self._lock:
            state = self.keys.get(job.key)
            if state is not None and job in state.jobs:
                state.jobs.remove(job)
                state.last_active = self.clock()

    def charge(self, job: Job, seconds: float) -> None:
        with self._lock:
            state = self.keys.get(job.key)
            if state is not None:
                state.used += seconds
                state.virtual += seconds / self.policy.weight(job.key)
                state.last_served = state.last_active = job.last_served_at = self.clock()
            self._raise_floor()

    def pick(self, resident: Collection[str]) -> Job | None:
        """The head job of the key that has used the least weighted GPU time, among jobs that can step now."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            for state in self.keys.values():
                for job in state.jobs:
                    if job.deadline is not None and now >= job.deadline:
                        job.cancel("request timed out")
                    if job.cancelled.is_set():  # dropping one costs no GPU time: do it first, wherever it waits
                        return job
            heads = [(key, state.jobs[0]) for key, state in self.keys.items() if state.jobs]
            ready = [
                (key, job) for key, job in heads
                if job.cancelled.is_set()
                or (job.buffered < self.policy.max_buffered_pieces and (job.ready is None or job.ready()))
            ]  # fmt: skip
            if not ready:
                return None
            on_resident = [(k, j) for k, j in ready if j.engine in resident or j.cancelled.is_set()]
            elsewhere = [(k, j) for k, j in ready if (k, j) not in on_resident]
            if on_resident and elsewhere:
                # Waiting counts from a job's last step (or its admission): right after a switch, the engine left
                # behind has to wait the whole bound again, so engines do not swap on every step.
                oldest = min(j.last_served_at or j.enqueued_at for _, j in elsewhere)
                ready = elsewhere if now - oldest >= self.policy.engine_switch_max_wait_s else on_resident
            self._raise_floor()
            key, job = min(ready, key=lambda kj: (self.keys[kj[0]].virtual, self.keys[kj[0]].last_served))
            return job

    def _raise_floor(self) -> None:
        busy = [s.virtual for s in self.keys.values() if s.jobs]
        if busy:
            self.floor = max(self.floor, min(busy))

    def _expire(self, now: float) -> None:
        ttl = self.policy.idle_state_ttl_s
        for key in [k for k, s in self.keys.items() if not s.jobs and now - s.last_active >= ttl]:
            del self.keys[key]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._expire(self.clock())
            jobs = [j for state in self.keys.values() for j in state.jobs]
            engines = sorted({j.engine for j in jobs} | set(self.rejected_by_engine))
            return {
                "running": sum(j.started_at is not None for j in jobs),
                "waiting": sum(j.started_at is None for j in jobs),
                "queued_chars": sum(j.chars for j in jobs if j.started_at is None),
                "rejected": self.rejected_total,
                "engines": {
                    engine: {
                        "running": sum(j.engine == engine and j.started_at is not None for j in jobs),
                        "waiting": sum(j.engine == engine and j.started_at is None for j in jobs),
                        "rejected": self.rejected_by_engine[engine],
                    }
                    for engine in engines
                },
                "keys": {
                    key: {
                        "running": sum(j.started_at is not None for j in state.jobs),
                        "waiting": sum(j.started_at is None for j in state.jobs),
                        "weight": self.policy.weight(key),
                        "used_gpu_s": round(state.used, 6),
                        "rejected": state.rejected,
                    }
                    for key, state in self.keys.items()
                },
            }


class Scheduler:
    """The fair queue driving the GPU thread: admission, one step at a time, cancellation before the next step."""

    def __init__(self, gpu: GpuThread, policy: FairnessPolicy, resident: Callable[[], Collection[str]]) -> None:
        self.gpu = gpu
        self.queue = FairQueue(policy)
        self.resident = resident
        gpu.attach(self._next_step)

    @property
    def policy(self) -> FairnessPolicy:
        return self.queue.policy

    def submit(self, job: Job) -> Job:
        """Admit the job or raise Busy (429); decided at once, before any audio is sent."""
        job._on_consumed = self.gpu.wake
        self.queue.add(job)
        self.gpu.wake()
        return job

    def stats(self) -> dict[str, Any]:
        return self.queue.stats()

    def _next_step(self) -> Step | None:
        job = self.queue.pick(self.resident())
        return (lambda: self._step(job)) if job is not None else None

    def _step(self, job: Job) -> None:
        """Run one step of `job` on the GPU thread, handing each piece over as it is produced."""
        began = time.perf_counter()
        ending: Any = None  # how the job ends with this step, if it does
        try:
            ending = self._run_unit(job, began)
        except Exception as exc:  # noqa: BLE001 - handed to the request
            ending = exc
        finally:
            # Accounted before the job's end is delivered, so its timings include this step.
            spent = time.perf_counter() - began
            job.gpu_seconds += spent
            self.queue.charge(job, spent)
            if ending is not None:
                self._finish(job, ending)

    def _run_unit(self, job: Job, began: float) -> Any:
        """One unit of the job; returns how the job ends (done or cancelled) when it ends with it, else None."""
        if job.cancelled.is_set():
            return JobCancelled(f"request dropped: {job.cancel_reason}")
        if job._units is None:
            job.started_at = began
            job._units = job.steps()
        unit = next(job._units, None)
        if unit is None:
            return _DONE
        try:
            for piece in unit:
                job._deliver(piece)
                if job.cancelled.is_set():  # a native stream is closed, not run to its end
                    break
        finally:
            close = getattr(unit, "close", None)
            if close is not None:
                close()
        job.units_done += 1
        if job.cancelled.is_set():
            return JobCancelled(f"request dropped: {job.cancel_reason}")
        if job.units_total is not None and job.units_done >= job.units_total:
            return _DONE
        return None

    def _finish(self, job: Job, outcome: Any) -> None:
        if job._units is not None:
            close = getattr(job._units, "close", None)
            if close is not None:
                close()  # runs the job's own clean-up (e.g. releasing MLX memory) here, on the GPU thread
        if outcome is not _DONE and job.cancelled.is_set():
            log.info("job %d (key %s) dropped before its next step: %s", job.id, job.key, job.cancel_reason)
        self.queue.remove(job)
        job._deliver(outcome)
