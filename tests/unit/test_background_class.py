"""The fair queue's background class (the steps of jobs/): driven by a hand-advanced clock, jobs never run.

A background step is picked only when no other job can step and no step is under way, so an interactive newcomer
or a playing stream waits for at most one background step; background work holds no admission place and costs its
key no share."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np

from gpu.fairness import FairQueue
from gpu.jobs import Job
from gpu.scheduling_settings import SchedulingSettings
from tests.support.clock import Clock

RATE = 24_000


def steps() -> Iterator[list[np.ndarray]]:
    yield [np.zeros(2, dtype=np.float32)]


def job(loop: asyncio.AbstractEventLoop, key: str, *, background: bool = False, streaming: bool = False) -> Job:
    return Job(
        engine="kokoro",
        chars=360,
        steps=steps,
        loop=loop,
        key=key,
        background=background,
        streaming=streaming,
        sample_rate=RATE if streaming else 0,
        unit_chars=(120, 120, 120),
    )


def queue(clock: Clock, lanes: int = 1, **settings: object) -> FairQueue:
    values: dict[str, object] = {"stream_admission": False, **settings}
    return FairQueue(SchedulingSettings(**values), clock=clock, lanes=lambda engine: lanes)  # type: ignore[arg-type]


def step(fair: FairQueue, clock: Clock, seconds: float = 1.0) -> Job | None:
    """Pick the next job and run its step for `seconds`; the job picked."""
    picked = fair.pick({"kokoro"})
    if picked is not None:
        clock.now += seconds
        picked.units_done += 1
        fair.charge(picked, seconds)
    return picked


def test_a_background_step_waits_for_every_interactive_job(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    fair = queue(clock)
    background = fair.add(job(loop, "reader", background=True))
    whole = fair.add(job(loop, "other"))
    stream = fair.add(job(loop, "third", streaming=True))
    order = [step(fair, clock) for _ in range(6)]
    assert order[0] is stream  # a newcomer's first step comes first
    assert background not in order  # while others have steps, the background job takes none
    fair.remove(whole)
    fair.remove(stream)
    assert step(fair, clock) is background  # nothing else wants the thread: the background job steps


def test_a_newcomer_waits_for_one_background_step_at_most(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    fair = queue(clock)
    background = fair.add(job(loop, "reader", background=True))
    assert fair.pick({"kokoro"}) is background  # the thread was idle: the background step runs
    newcomer = fair.add(job(loop, "listener", streaming=True))
    assert fair.pick({"kokoro"}) is None  # one engine lane: the background step under way ends first
    clock.now += 0.5
    background.units_done += 1
    fair.charge(background, 0.5)
    assert fair.pick({"kokoro"}) is newcomer  # then the newcomer, before the next background step
    clock.now += 0.5
    newcomer.units_done += 1
    fair.charge(newcomer, 0.5)
    # The stream is ahead of its listener now, but any interactive work goes before a background step.
    assert step(fair, clock) is newcomer


def test_on_an_engine_with_lanes_a_newcomer_starts_beside_the_background_step(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    fair = queue(clock, lanes=2)
    background = fair.add(job(loop, "reader", background=True))
    other_background = fair.add(job(loop, "writer", background=True))
    assert fair.pick({"kokoro"}) is background
    assert fair.pick({"kokoro"}) is None  # a second background step never starts beside it
    newcomer = fair.add(job(loop, "listener", streaming=True))
    assert fair.pick({"kokoro"}) is newcomer  # the free lane, at once
    assert other_background not in fair.state.running


def test_background_jobs_take_turns(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    fair = queue(clock)
    first = fair.add(job(loop, "a", background=True))
    second = fair.add(job(loop, "b", background=True))
    assert [step(fair, clock) for _ in range(4)] == [first, second, first, second]


def test_background_work_holds_no_admission_place_and_costs_no_share(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    fair = queue(clock, max_inflight=1, max_pending_per_key=1, max_queued_chars=400)
    background = fair.add(job(loop, "reader", background=True))
    fair.add(job(loop, "reader", background=True))  # jobs/ bounds its own work: never refused here
    interactive = fair.add(job(loop, "reader"))  # the key's one place is still free
    fair.remove(interactive)
    assert step(fair, clock, seconds=5.0) is background
    assert fair.state.keys["reader"].virtual == 0.0  # five seconds nobody else wanted cost the key no share
    assert fair.state.keys["reader"].used == 5.0


def test_a_background_step_is_cut_short_by_characters_never_by_measured_speed(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    fair = queue(clock, background_step_chars=60)
    asked: list[int] = []

    def shorten(max_chars: int, inside_clauses: bool) -> tuple[int, int]:
        asked.append(max_chars)
        assert not inside_clauses
        return 50, 70

    background = job(loop, "reader", background=True)
    background.shorten = shorten
    fair.add(background)
    assert fair.pick({"kokoro"}) is background
    assert fair.cut_step(background) and asked == [60]  # POLYTTS_BACKGROUND_STEP_CHARS, from its first step
    assert background.unit_chars == (50, 70, 120, 120)
    fair.learn(background, 10.0, 1.0, 0.0)  # a very slow engine measured: the budget is still characters
    assert fair.cut_step(background) and asked == [60, 60]
    whole = queue(Clock())
    other = job(loop, "reader", background=True)
    other.shorten = shorten
    whole.add(other)
    assert whole.pick({"kokoro"}) is other and not whole.cut_step(other)  # 0, the default: whole chunks
    interactive = job(loop, "file")
    interactive.shorten = shorten
    fair.add(interactive)
    assert not fair.cut_step(interactive) and asked == [60, 60]  # a whole-file request is never cut
