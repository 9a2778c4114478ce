"""The GPU thread and the scheduler driving it: real async tests whose steps are plain generators held at threading
gates."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from engines.step_stop import StepStopped
from gpu.gpu_thread import GpuThread
from gpu.jobs import Job, JobCancelled
from gpu.scheduler import Scheduler
from gpu.scheduling_settings import SchedulingSettings
from tests.support.polling import wait_until

WAIT = 2.0  # seconds any gate may block before a test fails instead of hanging
RATE = 24_000


@pytest.fixture
def gpu() -> Iterator[GpuThread]:
    thread = GpuThread()
    thread.start()
    yield thread
    thread.stop(timeout=WAIT)


def scheduling(**overrides: object) -> SchedulingSettings:
    """The scheduling settings these tests run under: the defaults, but room for 64 syntheses and 100,000 characters
    waiting (the fair queue's own defaults when these tests were written)."""
    return SchedulingSettings(**{"max_inflight": 64, "max_queued_chars": 100_000, **overrides})  # type: ignore[arg-type]


def scheduler_for(gpu: GpuThread, **overrides: object) -> Scheduler:
    return Scheduler(gpu, scheduling(**overrides), lambda: ["kokoro"])


def piece(value: float) -> np.ndarray:
    return np.full(2, value, dtype=np.float32)


def values(pieces: list[np.ndarray]) -> list[float]:
    return [float(p[0]) for p in pieces]


async def collect(job: Job) -> list[np.ndarray]:
    async def drain() -> list[np.ndarray]:
        return [p async for p in job.pieces()]

    return await asyncio.wait_for(drain(), WAIT)


async def next_piece(pieces: object) -> np.ndarray:
    return await asyncio.wait_for(pieces.__anext__(), WAIT)  # type: ignore[attr-defined]


def make_job(key: str, steps: object, chars: int = 10, deadline: float | None = None) -> Job:
    return Job(engine="kokoro", chars=chars, steps=steps, loop=asyncio.get_running_loop(), key=key, deadline=deadline)  # type: ignore[arg-type]


async def test_gpu_run_returns_results_and_errors_on_the_gpu_thread(gpu: GpuThread) -> None:
    assert await gpu.run(threading.get_ident) == gpu.ident != threading.get_ident()
    assert await gpu.run(pow, 2, 10) == 1024

    def broken() -> None:
        raise ValueError("bad load")

    with pytest.raises(ValueError, match="bad load"):
        await gpu.run(broken)
    assert await gpu.run(lambda: "still serving") == "still serving"


async def test_all_steps_run_on_the_gpu_thread_and_pieces_arrive_in_order(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    threads: set[int] = set()

    def unit(i: int) -> Iterator[np.ndarray]:
        for j in range(2):
            threads.add(threading.get_ident())
            yield piece(10 * i + j)

    def steps() -> Iterator[Iterator[np.ndarray]]:
        for i in range(3):
            threads.add(threading.get_ident())
            yield unit(i)

    job = scheduler.submit(make_job("a", steps))
    assert values(await collect(job)) == [0, 1, 10, 11, 20, 21]
    assert threads == {gpu.ident} and gpu.ident != threading.get_ident()
    assert job.started_at is not None and job.gpu_seconds > 0
    assert job.delivered == job.consumed == 7  # six pieces and the end
    stats = scheduler.stats()
    assert stats["running"] == stats["waiting"] == 0
    assert stats["keys"]["a"]["used_gpu_s"] > 0


async def test_two_keys_jobs_both_complete_in_their_own_order(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)

    def steps(base: int) -> object:
        def gen() -> Iterator[list[np.ndarray]]:
            for i in range(5):
                yield [piece(base + i)]

        return gen

    a = scheduler.submit(make_job("a", steps(0)))
    b = scheduler.submit(make_job("b", steps(100)))
    got_a, got_b = await asyncio.gather(collect(a), collect(b))
    assert values(got_a) == [0, 1, 2, 3, 4] and values(got_b) == [100, 101, 102, 103, 104]


async def test_an_engine_error_reaches_the_consumer_and_the_thread_keeps_serving(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    closed = threading.Event()

    def broken() -> Iterator[list[np.ndarray]]:
        try:
            yield [piece(0)]
            raise RuntimeError("engine broke")
        finally:
            closed.set()

    job = scheduler.submit(make_job("a", broken))
    pieces = job.pieces()
    assert values([await next_piece(pieces)]) == [0]
    with pytest.raises(RuntimeError, match="engine broke"):
        await next_piece(pieces)
    assert closed.is_set()
    ran_on: list[int] = []

    def fine() -> Iterator[list[np.ndarray]]:
        ran_on.append(threading.get_ident())
        yield [piece(1), piece(2)]

    assert values(await collect(scheduler.submit(make_job("a", fine)))) == [1, 2]
    assert ran_on == [gpu.ident]
    assert scheduler.stats()["running"] == 0


async def test_an_error_inside_a_stream_reaches_the_consumer(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    closed = threading.Event()

    def stream() -> Iterator[np.ndarray]:
        yield piece(0)
        raise RuntimeError("stream broke")

    def steps() -> Iterator[Iterator[np.ndarray]]:
        try:
            yield stream()
            yield iter([piece(99)])
        finally:
            closed.set()

    job = scheduler.submit(make_job("a", steps))
    received = []
    with pytest.raises(RuntimeError, match="stream broke"):
        async for p in job.pieces():
            received.append(p)
    assert values(received) == [0] and closed.is_set()


async def test_cancelling_after_the_first_piece_stops_before_the_next_step(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    hold = threading.Semaphore(0)  # keeps the thread inside step 0, after its piece, until the test has cancelled
    started: list[int] = []
    closed_on: list[int] = []

    def unit(i: int) -> Iterator[np.ndarray]:
        yield piece(i)
        assert hold.acquire(timeout=WAIT)

    def steps() -> Iterator[Iterator[np.ndarray]]:
        try:
            for i in range(5):
                started.append(i)
                yield unit(i)
        finally:
            closed_on.append(threading.get_ident())

    job = scheduler.submit(make_job("a", steps))
    pieces = job.pieces()
    assert values([await next_piece(pieces)]) == [0]
    job.cancel()
    hold.release()
    with pytest.raises(JobCancelled) as err:
        await next_piece(pieces)
    assert err.value.status == 504 and err.value.code == "request_timeout"
    assert "client disconnected" in err.value.message
    assert started == [0]  # step 1 never began
    assert closed_on == [gpu.ident]  # the steps generator was closed, on the GPU thread
    assert scheduler.stats()["running"] == scheduler.stats()["waiting"] == 0


class SaidStep:
    """A step of `chars` characters (as the service's steps say theirs) that yields one piece."""

    def __init__(self, chars: int) -> None:
        self.chars = chars

    def __iter__(self) -> Iterator[np.ndarray]:
        yield piece(self.chars)


async def test_a_steps_characters_are_counted_said_before_its_audio_reaches_the_reader(gpu: GpuThread) -> None:
    """A reader may leave as soon as it has the audio, and its request's line is written then: what the line says was
    spoken already counts the step it heard (it read 0 when the count came after the delivery)."""
    scheduler = scheduler_for(gpu)
    job = make_job("a", lambda: iter([SaidStep(12), SaidStep(30)]))
    counted_at_delivery: list[int] = []
    deliver = job._deliver

    def delivering(piece: object) -> None:
        counted_at_delivery.append(job.spoken_chars)
        deliver(piece)

    job._deliver = delivering  # type: ignore[method-assign,assignment]
    assert values(await collect(scheduler.submit(job))) == [12, 30]
    assert counted_at_delivery[:2] == [12, 42]


async def test_cancelling_mid_step_closes_the_stream_without_running_it_to_its_end(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    hold = threading.Semaphore(0)
    resumed = threading.Event()
    produced: list[int] = []
    stream_closed = threading.Event()
    steps_closed = threading.Event()

    def stream() -> Iterator[np.ndarray]:
        try:
            for i in range(5):
                produced.append(i)
                yield piece(i)
                if i == 0:
                    resumed.set()  # the scheduler has handed piece 0 over and looked for a cancel
                    assert hold.acquire(timeout=WAIT)
        finally:
            stream_closed.set()

    def steps() -> Iterator[Iterator[np.ndarray]]:
        try:
            yield stream()
            yield iter([piece(99)])
        finally:
            steps_closed.set()

    job = scheduler.submit(make_job("a", steps))
    pieces = job.pieces()
    assert values([await next_piece(pieces)]) == [0]
    assert await asyncio.to_thread(resumed.wait, WAIT)
    job.cancel()
    hold.release()
    assert values([await next_piece(pieces)]) == [1]  # the piece already being produced is handed over
    with pytest.raises(JobCancelled):
        await next_piece(pieces)
    assert produced == [0, 1]
    assert stream_closed.is_set() and steps_closed.is_set()


async def test_a_job_cancelled_while_waiting_never_runs_its_steps(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    inside, hold = threading.Event(), threading.Event()

    def blocker_stream() -> Iterator[np.ndarray]:
        yield piece(0)
        inside.set()
        assert hold.wait(WAIT)

    def blocker() -> Iterator[Iterator[np.ndarray]]:
        yield blocker_stream()

    ran: list[str] = []

    def never() -> Iterator[list[np.ndarray]]:
        ran.append("ran")
        yield [piece(1)]

    first = scheduler.submit(make_job("a", blocker))
    assert inside.wait(WAIT)  # the thread is busy with "a"
    waiting = scheduler.submit(make_job("b", never))
    waiting.cancel()
    hold.set()
    with pytest.raises(JobCancelled) as err:
        await collect(waiting)
    assert err.value.status == 504 and err.value.code == "request_timeout"
    assert ran == [] and waiting.started_at is None and waiting._units is None
    assert values(await collect(first)) == [0]


async def test_a_job_past_its_deadline_is_dropped_with_a_504(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    ran: list[str] = []

    def never() -> Iterator[list[np.ndarray]]:
        ran.append("ran")
        yield [piece(1)]

    job = scheduler.submit(make_job("a", never, deadline=time.monotonic() - 1.0))
    with pytest.raises(JobCancelled) as err:
        await collect(job)
    assert err.value.status == 504 and err.value.code == "request_timeout"
    assert "timed out" in err.value.message
    assert ran == []


async def test_one_off_calls_run_between_steps_of_a_long_job(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    order: list[str] = []
    permits = threading.Semaphore(0)
    entered = [threading.Event() for _ in range(4)]

    def steps() -> Iterator[list[np.ndarray]]:
        for i in range(4):
            entered[i].set()
            assert permits.acquire(timeout=WAIT)
            order.append(f"step{i}")
            yield [piece(i)]

    job = scheduler.submit(make_job("a", steps))
    consumer = asyncio.ensure_future(collect(job))
    loop = asyncio.get_running_loop()
    for i in range(3):
        assert entered[i].wait(WAIT)  # the thread is inside step i
        call = asyncio.ensure_future(gpu.run(order.append, f"call{i}"))
        loop.call_soon(permits.release)  # runs after the task above has submitted its call
        await asyncio.wait_for(call, WAIT)
    permits.release()
    assert values(await consumer) == [0, 1, 2, 3]
    assert order == ["step0", "call0", "step1", "call1", "step2", "call2", "step3"]


async def test_a_short_job_gets_its_first_piece_after_at_most_one_more_step_of_a_long_one(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    order: list[str] = []
    permits = threading.Semaphore(0)
    entered = [threading.Event() for _ in range(10)]

    def long_steps() -> Iterator[list[np.ndarray]]:
        for i in range(10):
            entered[i].set()
            assert permits.acquire(timeout=WAIT)
            order.append(f"a{i}")
            yield [piece(i)]

    def short_steps() -> Iterator[list[np.ndarray]]:
        for i in range(2):
            order.append(f"b{i}")
            yield [piece(100 + i)]

    long = scheduler.submit(make_job("a", long_steps))
    long_pieces = asyncio.ensure_future(collect(long))
    permits.release(2)
    assert entered[2].wait(WAIT)  # "a" has run two steps and is inside its third
    short = scheduler.submit(make_job("b", short_steps))
    permits.release(8)
    assert values(await collect(short)) == [100, 101]
    assert values(await long_pieces) == list(range(10))
    first_b = order.index("b0")
    assert order[:first_b] == ["a0", "a1", "a2"]  # only the step under way when "b" arrived
    assert sorted(order) == sorted([f"a{i}" for i in range(10)] + ["b0", "b1"])


async def test_a_slow_reader_gets_no_new_steps_until_it_catches_up(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu, max_buffered_pieces=2)
    buffered_at_step: list[int] = []
    holder: list[Job] = []

    def steps() -> Iterator[list[np.ndarray]]:
        for i in range(10):
            buffered_at_step.append(holder[0].buffered)
            yield [piece(i)]

    job = make_job("a", steps)
    holder.append(job)
    scheduler.submit(job)

    def other() -> Iterator[list[np.ndarray]]:
        yield [piece(100)]

    assert values(await collect(scheduler.submit(make_job("b", other)))) == [100]
    await gpu.run(lambda: None)
    assert job.delivered <= 2  # nobody read "a": it stopped at its bound while "b" ran to its end
    assert values(await collect(job)) == list(range(10))
    assert len(buffered_at_step) == 10 and max(buffered_at_step) < 2


async def test_an_unexpected_error_in_a_step_does_not_kill_the_gpu_thread(gpu: GpuThread) -> None:
    gpu.submit(lambda: None)
    failing = gpu.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(2)
    assert await gpu.run(lambda: "alive") == "alive"


async def test_a_stream_that_runs_dry_records_its_underrun_on_the_job_and_the_engine(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    second = threading.Event()
    piece_s = 0.05

    def steps() -> Iterator[list[np.ndarray]]:
        yield [np.zeros(int(piece_s * RATE), dtype=np.float32)]
        assert second.wait(WAIT)
        yield [np.zeros(int(piece_s * RATE), dtype=np.float32)]

    job = Job(
        engine="kokoro",
        chars=20,
        steps=steps,
        loop=asyncio.get_running_loop(),
        streaming=True,
        sample_rate=RATE,
        unit_chars=(10, 10),
    )
    scheduler.submit(job)
    pieces = job.pieces()
    await next_piece(pieces)
    ran_dry_at = job.playback.ends_at
    assert ran_dry_at is not None
    asking = asyncio.ensure_future(next_piece(pieces))  # the writer asks for the next piece at once
    while time.monotonic() < ran_dry_at + 0.2:  # the listener's clock runs out; the second step is held
        await asyncio.sleep(0.02)
    second.set()
    await asking
    assert job.underruns == 1 and job.underrun_s >= 0.2
    stats = scheduler.stats()["streams"]
    assert stats["underruns"] == {"kokoro": 1}
    assert stats["underrun_s"]["kokoro"] == pytest.approx(job.underrun_s, abs=1e-5)
    assert stats["speed"]["kokoro"]["audio_s_per_char"] == pytest.approx(piece_s / 10)  # learned from its steps
    with pytest.raises(StopAsyncIteration):
        await next_piece(pieces)


async def test_whole_file_jobs_have_no_playback_clock(gpu: GpuThread) -> None:
    scheduler = scheduler_for(gpu)
    held: list[Job] = []

    def unit() -> Iterator[np.ndarray]:
        yield np.zeros(RATE, dtype=np.float32)
        # The end comes only after the reader has taken the audio and asked for more (a loaded machine): that wait
        # is no underrun of a response nobody plays as it arrives.
        job = held[0]
        wait_until(lambda: job.consumed and job.playback.asking_since is not None, WAIT, "the reader to ask again")

    def steps() -> Iterator[Iterator[np.ndarray]]:
        yield unit()

    job = Job(
        engine="kokoro", chars=10, steps=steps, loop=asyncio.get_running_loop(), sample_rate=RATE, unit_chars=(10,)
    )
    held.append(job)
    assert len(await collect(scheduler.submit(job))) == 1
    assert job.playback.delivered_s == 0 and job.underrun_s == 0
    stats = scheduler.stats()["streams"]
    assert stats["underruns"] == {"kokoro": 0}
    assert stats["speed"]["kokoro"]["audio_s_per_char"] == pytest.approx(0.1)


async def test_steps_of_an_engine_with_lanes_run_at_once_and_one_off_calls_wait_for_them(gpu: GpuThread) -> None:
    scheduler = Scheduler(gpu, scheduling(), lambda: ["kokoro"], lanes=lambda engine: 2)
    both_inside = threading.Barrier(2, timeout=WAIT)  # passes only while both steps run at once
    release = threading.Event()
    events: list[str] = []
    lanes: set[str] = set()

    def steps(name: str) -> object:
        def unit() -> Iterator[np.ndarray]:
            lanes.add(threading.current_thread().name)
            both_inside.wait()
            assert release.wait(WAIT)
            events.append(f"{name} ends")
            yield piece(1)

        def gen() -> Iterator[Iterator[np.ndarray]]:
            yield unit()

        return gen

    a = scheduler.submit(make_job("a", steps("a")))
    b = scheduler.submit(make_job("b", steps("b")))
    pieces = asyncio.ensure_future(asyncio.gather(collect(a), collect(b)))
    await asyncio.to_thread(wait_until, lambda: gpu.on_lanes == 2, WAIT, "both steps on lanes")
    call = gpu.submit(lambda: events.append("call"))
    assert not call.done()  # a one-off call (a load, an eviction) never runs beside a step
    release.set()
    await asyncio.wrap_future(call)
    assert [len(p) for p in await pieces] == [1, 1]
    assert events[-1] == "call" and sorted(events[:2]) == ["a ends", "b ends"]
    assert all("lane" in name for name in lanes) and len(lanes) == 2
    assert scheduler.stats()["running"] == 0


async def test_a_background_step_stopped_before_its_audio_is_said_again_and_after_it_fails(gpu: GpuThread) -> None:
    """A step stopped before it delivered anything gives its chunk back to its source (`Job.give_back`) and the job's
    next step takes it again; a step stopped after it delivered audio cannot be said again, so the job fails rather
    than say part of its audio twice."""

    def stopped_once(deliver_first: bool) -> Job:
        left = collections.deque([1.0, 2.0])
        taken: list[float] = []
        tries = 0

        def unit(value: float) -> Iterator[np.ndarray]:
            nonlocal tries
            tries += 1
            if tries == 1:  # the first try is stopped, as an arrival's stop would stop it
                if deliver_first:
                    yield piece(value)
                raise StepStopped
            yield piece(value)

        def steps() -> Iterator[Iterator[np.ndarray]]:
            while left:
                taken.append(left.popleft())
                yield unit(taken[-1])

        job = Job("kokoro", 10, steps, loop, background=True, unit_chars=(5, 5))
        job.give_back = lambda: left.appendleft(taken.pop())
        return job

    scheduler = scheduler_for(gpu)
    loop = asyncio.get_running_loop()
    redone = scheduler.submit(stopped_once(False))
    assert values(await collect(redone)) == [1.0, 2.0]  # the stopped step said again, once
    broken = scheduler.submit(stopped_once(True))
    with pytest.raises(RuntimeError, match="after it had delivered audio"):
        await collect(broken)
