"""The GPU thread and admission, driven with plain step generators (no model)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from errors import Busy
from scheduler import GpuThread, Job, Scheduler


@pytest.fixture
def gpu() -> Iterator[GpuThread]:
    thread = GpuThread()
    thread.start()
    yield thread
    thread.stop()


def make_scheduler(gpu: GpuThread, max_inflight: int = 4, max_queued_chars: int = 100) -> Scheduler:
    return Scheduler(gpu, max_inflight=max_inflight, max_queued_chars=max_queued_chars, retry_after=3)


class Steps:
    """A job's steps that record which thread ran them and can be held at a gate."""

    def __init__(
        self,
        count: int,
        gate: threading.Event | None = None,
        fail_at: int | None = None,
        permits: threading.Semaphore | None = None,
    ) -> None:
        self.count = count
        self.gate = gate
        self.permits = permits
        self.fail_at = fail_at
        self.ran: list[int] = []
        self.threads: set[int] = set()
        self.closed = False

    def __call__(self) -> Iterator[np.ndarray]:
        try:
            for i in range(self.count):
                if self.gate is not None:
                    self.gate.wait(5)
                if self.permits is not None:
                    self.permits.acquire(timeout=5)
                self.threads.add(threading.get_ident())
                if i == self.fail_at:
                    raise RuntimeError("engine broke")
                self.ran.append(i)
                yield np.full(4, i, dtype=np.float32)
        finally:
            self.closed = True


def job(steps: Steps, chars: int = 10) -> Job:
    return Job(engine="fake", chars=chars, steps=steps, loop=asyncio.get_running_loop())


async def test_every_call_and_step_runs_on_the_one_gpu_thread(gpu: GpuThread) -> None:
    idents = {await gpu.run(threading.get_ident) for _ in range(5)}
    steps = Steps(3)
    pieces = [p async for p in make_scheduler(gpu).submit(job(steps)).pieces()]
    assert [int(p[0]) for p in pieces] == [0, 1, 2]
    assert idents == steps.threads == {gpu.ident}
    assert gpu.ident != threading.get_ident()


async def test_engine_errors_reach_the_request(gpu: GpuThread) -> None:
    steps = Steps(3, fail_at=1)
    submitted = make_scheduler(gpu).submit(job(steps))
    received = []
    with pytest.raises(RuntimeError, match="engine broke"):
        async for piece in submitted.pieces():
            received.append(piece)
    assert len(received) == 1 and steps.closed


async def test_in_flight_bound_is_a_429(gpu: GpuThread) -> None:
    scheduler = make_scheduler(gpu, max_inflight=2)
    gate = threading.Event()
    first, second = scheduler.submit(job(Steps(1, gate))), scheduler.submit(job(Steps(1, gate)))
    with pytest.raises(Busy) as err:
        scheduler.submit(job(Steps(1)))
    assert err.value.status == 429 and err.value.code == "server_busy" and err.value.headers() == {"Retry-After": "3"}
    assert scheduler.stats()["rejected"] == 1
    gate.set()
    for submitted in (first, second):
        assert len([p async for p in submitted.pieces()]) == 1
    scheduler.submit(job(Steps(1)))  # room again


async def test_waiting_text_bound_is_a_429(gpu: GpuThread) -> None:
    scheduler = make_scheduler(gpu, max_inflight=10, max_queued_chars=100)
    gate = threading.Event()
    running = scheduler.submit(job(Steps(1, gate), chars=500))  # an empty queue admits any size
    while scheduler.stats()["running"] == 0:
        await asyncio.sleep(0.01)
    waiting = scheduler.submit(job(Steps(1), chars=60))
    assert scheduler.stats() == {"running": 1, "waiting": 1, "queued_chars": 60, "rejected": 0}
    with pytest.raises(Busy, match="characters waiting"):
        scheduler.submit(job(Steps(1), chars=41))
    gate.set()
    for submitted in (running, waiting):
        assert [p async for p in submitted.pieces()]


async def test_cancelled_job_stops_before_its_next_step(gpu: GpuThread) -> None:
    permits = threading.Semaphore(1)  # one step at a time, released by the test
    steps = Steps(100, permits=permits)
    submitted = make_scheduler(gpu).submit(job(steps))
    async for _ in submitted.pieces():
        submitted.cancel()
        break
    for _ in range(10):
        permits.release()
    follower = Steps(1)
    assert len([p async for p in make_scheduler(gpu).submit(job(follower)).pieces()]) == 1
    # Step 1 may already have been waiting for its permit when the cancel came; nothing after it runs.
    assert steps.ran in ([0], [0, 1]) and steps.closed


async def test_job_cancelled_while_waiting_never_runs(gpu: GpuThread) -> None:
    scheduler = make_scheduler(gpu)
    gate = threading.Event()
    blocker = scheduler.submit(job(Steps(1, gate)))
    waiting_steps = Steps(5)
    waiting = scheduler.submit(job(waiting_steps))
    waiting.cancel()
    gate.set()
    assert len([p async for p in blocker.pieces()]) == 1
    await gpu.run(lambda: None)  # everything queued before this has run
    assert waiting_steps.ran == []
    assert scheduler.stats()["running"] == scheduler.stats()["waiting"] == 0
