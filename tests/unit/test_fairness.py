"""The weighted fair queue, driven deterministically: a hand-advanced clock and jobs that are never run (FairQueue is
pure bookkeeping)."""

from __future__ import annotations

import asyncio
import collections
import heapq
from collections.abc import Iterable, Iterator

import numpy as np
import pytest

from errors import Busy
from gpu.admission import PROMISE_MARGIN
from gpu.fairness import FairQueue
from gpu.jobs import Job
from gpu.playback import EngineSpeed
from gpu.queue_stats import OTHER_KEYS
from gpu.retry_line import MAX_PLACES
from gpu.scheduling_settings import SchedulingSettings
from lifecycle.chunk_sources import PlannedChunks
from tests.support.clock import Clock
from text.chunking import Chunk, chunk_text


def fake_steps() -> Iterator[list[np.ndarray]]:
    for i in range(3):
        yield [np.full(2, i, dtype=np.float32)]


def fake_job(
    loop: asyncio.AbstractEventLoop,
    key: str,
    engine: str = "kokoro",
    chars: int = 10,
    deadline: float | None = None,
) -> Job:
    return Job(engine=engine, chars=chars, steps=fake_steps, loop=loop, key=key, deadline=deadline)


def roomy(**overrides: object) -> SchedulingSettings:
    """Scheduling settings whose admission bounds stay out of the way unless a test sets them."""
    values: dict[str, object] = {
        "max_pending_per_key": 1000,
        "max_pending_per_engine": 1000,
        "max_inflight": 1000,
        "max_queued_chars": 10**9,
        "stream_admission": False,
    }
    values.update(overrides)
    return SchedulingSettings(**values)  # type: ignore[arg-type]


def run_shares(
    queue: FairQueue,
    clock: Clock,
    loop: asyncio.AbstractEventLoop,
    keys: Iterable[str],
    steps: int,
    steps_per_job: int = 5,
    resident: Iterable[str] = ("kokoro",),
) -> collections.Counter[str]:
    """pick -> 1 fake second -> charge, removing each job after `steps_per_job` steps; returns steps per key."""
    for key in keys:
        for _ in range(steps):  # more than enough work for every key
            queue.add(fake_job(loop, key))
    done: collections.Counter[Job] = collections.Counter()
    served: collections.Counter[str] = collections.Counter()
    for _ in range(steps):
        job = queue.pick(set(resident))
        assert job is not None
        clock.advance(1.0)
        queue.charge(job, 1.0)
        served[job.key] += 1
        done[job] += 1
        if done[job] == steps_per_job:
            queue.remove(job)
    return served


def test_one_keys_jobs_keep_their_order(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(), clock)
    first, second, third = (queue.add(fake_job(loop, "a")) for _ in range(3))
    assert [first.id, second.id, third.id] == [1, 2, 3]
    assert queue.pick({"kokoro"}) is first
    queue.charge(first, 1.0)
    assert queue.pick({"kokoro"}) is first  # the head stays the head until it is removed
    queue.remove(first)
    assert queue.pick({"kokoro"}) is second
    queue.remove(second)
    assert queue.pick({"kokoro"}) is third
    queue.remove(third)
    assert queue.pick({"kokoro"}) is None
    assert queue.stats()["keys"]["a"]["waiting"] == 0


def test_weights_share_gpu_time_two_to_one(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(fairness_weights={"a": 2.0}, fairness_default_weight=1.0), clock)
    served = run_shares(queue, clock, loop, ["a", "b"], steps=200)
    assert abs(served["a"] - 133) <= 2 and abs(served["b"] - 67) <= 2, served
    keys = queue.stats()["keys"]
    assert keys["a"]["weight"] == 2.0 and keys["b"]["weight"] == 1.0
    assert keys["a"]["used_gpu_s"] == served["a"] and keys["b"]["used_gpu_s"] == served["b"]


def test_default_weight_applies_to_every_unnamed_key(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(fairness_weights={"slow": 1.0}, fairness_default_weight=2.0), clock)
    served = run_shares(queue, clock, loop, ["anyone", "slow"], steps=150)
    assert abs(served["anyone"] - 100) <= 2 and abs(served["slow"] - 50) <= 2, served


def test_a_key_name_grants_no_weight_by_itself(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(fairness_weights={"a": 2.0}), clock)
    served = run_shares(queue, clock, loop, ["admin", "interactive", "anonymous"], steps=150)
    assert all(abs(served[key] - 50) <= 1 for key in ("admin", "interactive", "anonymous")), served
    assert {key: s["weight"] for key, s in queue.stats()["keys"].items()} == {
        "admin": 1.0,
        "interactive": 1.0,
        "anonymous": 1.0,
    }


def test_a_lone_key_uses_all_capacity(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(fairness_weights={"a": 0.1, "idle": 100.0}), clock)
    idle = queue.add(fake_job(loop, "idle"))
    assert queue.pick({"kokoro"}) is idle
    queue.remove(idle)  # "idle" was busy once, then went idle (its state is kept)
    job = queue.add(fake_job(loop, "a"))
    for _ in range(50):
        assert queue.pick({"kokoro"}) is job
        clock.advance(1.0)
        queue.charge(job, 1.0)
    assert queue.stats()["keys"]["a"]["used_gpu_s"] == 50.0


def test_a_newly_busy_key_starts_level_with_the_least_served_busy_key(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(), clock)
    a = queue.add(fake_job(loop, "a"))
    clock.advance(10.0)
    queue.charge(a, 100.0)  # "a" has used 100 s, last served at t=10
    clock.advance(1.0)
    b = queue.add(fake_job(loop, "b"))
    order = []
    for _ in range(10):
        job = queue.pick({"kokoro"})
        assert job is not None
        order.append(job.key)
        clock.advance(1.0)
        queue.charge(job, 1.0)
    # Level at 100: the tie goes to the least recently served ("b"), then they alternate; no 100 s catch-up.
    assert order == ["b", "a"] * 5
    keys = queue.stats()["keys"]
    assert keys["a"]["used_gpu_s"] == 105.0 and keys["b"]["used_gpu_s"] == 5.0
    assert b in queue.state.keys["b"].jobs


def test_a_returning_key_gets_no_credit_for_its_idle_time(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(), clock)
    a = queue.add(fake_job(loop, "a"))
    b = queue.add(fake_job(loop, "b"))
    queue.charge(a, 10.0)
    queue.charge(b, 10.0)
    queue.remove(b)  # "b" goes idle at 10 s used while "a" keeps working up to 60 s
    for _ in range(50):
        clock.advance(1.0)
        queue.charge(a, 1.0)
    queue.add(fake_job(loop, "b"))
    picks = []
    for _ in range(6):
        job = queue.pick({"kokoro"})
        assert job is not None
        picks.append(job.key)
        clock.advance(1.0)
        queue.charge(job, 1.0)
    assert picks == ["b", "a"] * 3  # "b" comes back level with "a" (60), not 50 s behind it


def test_idle_key_state_is_kept_until_the_ttl(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(idle_state_ttl_s=300.0), clock)
    job = queue.add(fake_job(loop, "a"))
    clock.advance(1.0)
    queue.charge(job, 5.0)
    clock.advance(9.0)
    queue.remove(job)  # idle from t=10
    clock.advance(299.9)
    assert queue.pick({"kokoro"}) is None  # pick (like add) applies the expiry
    assert queue.stats()["keys"]["a"]["used_gpu_s"] == 5.0
    clock.advance(0.1)  # idle for exactly the ttl
    assert queue.pick({"kokoro"}) is None
    assert "a" not in queue.stats()["keys"]
    queue.add(fake_job(loop, "a"))
    assert queue.stats()["keys"]["a"]["used_gpu_s"] == 0.0
    assert queue.state.keys["a"].virtual == queue.state.floor  # forgotten: it starts level with the system, no credit


def test_busy_key_state_never_expires(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(idle_state_ttl_s=300.0), clock)
    job = queue.add(fake_job(loop, "a"))
    queue.charge(job, 5.0)
    clock.advance(10_000.0)  # a very long step: the key still has its job
    assert queue.pick({"kokoro"}) is job
    assert queue.stats()["keys"]["a"]["used_gpu_s"] == 5.0


def test_expiry_counts_from_the_last_activity(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(idle_state_ttl_s=100.0), clock)
    first = queue.add(fake_job(loop, "a"))
    queue.charge(first, 3.0)
    queue.remove(first)
    clock.advance(90.0)
    second = queue.add(fake_job(loop, "a"))  # active again before the ttl: state kept
    queue.charge(second, 2.0)
    queue.remove(second)
    clock.advance(99.0)
    queue.pick({"kokoro"})
    assert queue.stats()["keys"]["a"]["used_gpu_s"] == 5.0
    clock.advance(1.0)
    queue.pick({"kokoro"})
    assert queue.stats()["keys"] == {}


def test_stats_alone_forgets_an_expired_key(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(idle_state_ttl_s=300.0), clock)
    job = queue.add(fake_job(loop, "a"))
    queue.charge(job, 5.0)
    queue.remove(job)
    clock.advance(1000.0)
    assert "a" not in queue.stats()["keys"]


def test_resident_engine_keeps_the_thread_until_the_switch_bound(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(engine_switch_max_wait_s=5.0), clock)
    vox = queue.add(fake_job(loop, "b", engine="voxcpm"))  # "b" has used nothing at all
    kok = queue.add(fake_job(loop, "a", engine="kokoro"))
    picks = []
    for _ in range(5):  # t = 0..4: voxcpm's wait is below the bound
        job = queue.pick({"kokoro"})
        assert job is not None
        picks.append(job)
        clock.advance(1.0)
        queue.charge(job, 1.0)
    assert picks == [kok] * 5
    assert queue.state.keys["a"].used == 5.0 and queue.state.keys["b"].used == 0.0
    assert clock() == 5.0  # voxcpm's request has now waited exactly the bound
    assert queue.pick({"kokoro"}) is vox


def test_other_engine_is_served_at_once_when_the_resident_one_has_no_ready_work(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = FairQueue(roomy(engine_switch_max_wait_s=5.0, max_buffered_pieces=1), clock)
    vox = queue.add(fake_job(loop, "b", engine="voxcpm"))
    kok = queue.add(fake_job(loop, "a", engine="kokoro"))
    kok.delivered = 1  # its reader is behind: it cannot step
    assert queue.pick({"kokoro"}) is vox
    queue.charge(vox, 0.0)
    assert queue.pick(set()) is vox  # nothing resident: plain fairness


def test_after_an_engine_switch_the_new_engine_keeps_the_thread(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(engine_switch_max_wait_s=5.0), clock)
    queue.add(fake_job(loop, "a", engine="kokoro"))  # two long syntheses on two engines, one resident at a time
    queue.add(fake_job(loop, "b", engine="voxcpm"))
    resident = {"kokoro"}
    engines = []
    for _ in range(20):
        job = queue.pick(resident)
        assert job is not None
        engines.append(job.engine)
        resident = {job.engine}  # the step loads its engine, evicting the other (coload off)
        clock.advance(1.0)
        queue.charge(job, 1.0)
    assert engines[:5] == ["kokoro"] * 5
    assert engines[5:9] == ["voxcpm"] * 4  # actual: voxcpm, kokoro, voxcpm, kokoro, ...
    switches = sum(x != y for x, y in zip(engines, engines[1:]))
    assert switches <= 4


def test_key_queue_full_is_a_429(loop: asyncio.AbstractEventLoop) -> None:
    queue = FairQueue(roomy(max_pending_per_key=2), Clock())
    queue.add(fake_job(loop, "a", chars=100))
    queue.add(fake_job(loop, "a", chars=100))
    with pytest.raises(Busy) as err:
        queue.add(fake_job(loop, "a", chars=100))
    assert err.value.status == 429
    assert err.value.code == "fairness_key_queue_full"
    # Each holds 7 s of GPU work (the prior speed); a key's jobs run in order, so the first ends after 7 s.
    assert err.value.headers() == {"Retry-After": "7"}
    assert "'a' has 2 requests pending" in err.value.message
    queue.add(fake_job(loop, "b"))  # another key is still admitted
    stats = queue.stats()
    assert stats["rejected"] == 1
    assert stats["keys"]["a"]["rejected"] == 1 and stats["keys"]["b"]["rejected"] == 0
    assert stats["engines"]["kokoro"] == {"running": 0, "waiting": 3, "rejected": 1}


def test_engine_queue_full_is_a_429(loop: asyncio.AbstractEventLoop) -> None:
    queue = FairQueue(roomy(max_pending_per_engine=2), Clock())
    queue.add(fake_job(loop, "a", engine="kokoro", chars=100))
    queue.add(fake_job(loop, "b", engine="kokoro", chars=50))
    with pytest.raises(Busy) as err:
        queue.add(fake_job(loop, "c", engine="kokoro"))
    assert err.value.status == 429
    assert err.value.code == "engine_queue_full"
    assert err.value.headers() == {"Retry-After": "7"}  # "b" (3.5 s of work) ends after 3.5 s of each key
    assert "'kokoro' has 2 requests pending" in err.value.message
    queue.add(fake_job(loop, "c", engine="voxcpm"))  # another engine is still admitted
    stats = queue.stats()
    assert stats["rejected"] == 1
    assert stats["engines"]["kokoro"]["rejected"] == 1 and stats["engines"]["voxcpm"]["rejected"] == 0
    # "c" had no state when it was refused: counted without creating one, under OTHER_KEYS
    assert stats["keys"]["c"]["rejected"] == 0 and stats["keys"]["c"]["waiting"] == 1
    assert stats["keys"][OTHER_KEYS]["rejected"] == 1 and stats["rejected_by_code"] == {"engine_queue_full": 1}


def test_inflight_bound_is_a_server_busy_429(loop: asyncio.AbstractEventLoop) -> None:
    queue = FairQueue(roomy(max_inflight=2), Clock())
    first = queue.add(fake_job(loop, "a", chars=15))
    first.started_at = 1.0  # running jobs count too
    queue.add(fake_job(loop, "b", engine="voxcpm", chars=15))
    with pytest.raises(Busy) as err:
        queue.add(fake_job(loop, "c", engine="qwen"))
    assert err.value.status == 429
    assert err.value.code == "server_busy"
    assert err.value.headers() == {"Retry-After": "3"}  # 1.05 s of work each: the first ends after 2.1 s (rounded up)
    assert "2 syntheses in flight" in err.value.message
    queue.remove(first)
    queue.add(fake_job(loop, "c", engine="qwen"))  # room again
    stats = queue.stats()
    assert stats["rejected"] == 1
    assert stats["keys"]["c"]["rejected"] == 0 and stats["keys"][OTHER_KEYS]["rejected"] == 1
    assert stats["engines"]["qwen"] == {"running": 0, "waiting": 1, "rejected": 1}


def test_queued_characters_bound_is_a_server_busy_429(loop: asyncio.AbstractEventLoop) -> None:
    queue = FairQueue(roomy(max_queued_chars=100), Clock())
    running = queue.add(fake_job(loop, "a", chars=500))  # an empty queue admits any size
    running.started_at = 1.0  # started: its text no longer counts as waiting
    queue.add(fake_job(loop, "b", chars=60))
    with pytest.raises(Busy) as err:
        queue.add(fake_job(loop, "c", chars=41))
    assert err.value.status == 429
    assert err.value.code == "server_busy"
    assert err.value.headers() == {"Retry-After": "9"}  # "b" waits: 4.2 s of work, and 4.2 s of "a" beside it
    assert "60 characters waiting" in err.value.message
    queue.add(fake_job(loop, "c", chars=40))  # exactly at the bound is admitted
    stats = queue.stats()
    assert stats["queued_chars"] == 100 and stats["running"] == 1 and stats["waiting"] == 2
    assert stats["rejected"] == 1 and stats["keys"][OTHER_KEYS]["rejected"] == 1
    assert stats["engines"]["kokoro"]["rejected"] == 1


def test_rejections_are_counted_per_key_and_engine(loop: asyncio.AbstractEventLoop) -> None:
    queue = FairQueue(roomy(max_pending_per_key=1, max_pending_per_engine=2), Clock())
    queue.add(fake_job(loop, "a", engine="kokoro"))
    queue.add(fake_job(loop, "b", engine="kokoro"))
    for key, engine in [("a", "kokoro"), ("a", "voxcpm"), ("c", "kokoro"), ("b", "voxcpm")]:
        with pytest.raises(Busy):
            queue.add(fake_job(loop, key, engine=engine))
    stats = queue.stats()
    assert stats["rejected"] == 4
    # keys with state count their own rejections; "c" never had any, so no state was made for it
    assert {key: s["rejected"] for key, s in stats["keys"].items()} == {"a": 2, "b": 1, OTHER_KEYS: 1}
    assert "c" not in queue.state.keys
    assert {engine: s["rejected"] for engine, s in stats["engines"].items()} == {"kokoro": 2, "voxcpm": 2}


def test_a_job_with_a_full_buffer_is_not_picked(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(max_buffered_pieces=2), clock)
    slow = queue.add(fake_job(loop, "a"))
    other = queue.add(fake_job(loop, "b"))
    queue.charge(other, 50.0)  # "b" is far behind on fairness
    slow.delivered, slow.consumed = 2, 0
    assert queue.pick({"kokoro"}) is other
    queue.charge(other, 0.0)
    slow.consumed = 1  # its reader caught up by one piece
    assert queue.pick({"kokoro"}) is slow
    queue.charge(slow, 0.0)
    slow.delivered = 3
    queue.remove(other)
    assert queue.pick({"kokoro"}) is None  # nothing can step
    slow.cancel()
    assert queue.pick({"kokoro"}) is slow  # a cancelled job is picked whatever its buffer, to be dropped


def test_a_job_past_its_deadline_is_cancelled_and_still_returned(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock(100.0)
    queue = FairQueue(roomy(), clock)
    job = queue.add(fake_job(loop, "a", deadline=105.0))
    clock.advance(4.9)
    assert queue.pick({"kokoro"}) is job
    queue.charge(job, 0.0)
    assert not job.cancelled.is_set() and job.cancel_reason is None
    clock.advance(0.1)
    assert queue.pick({"kokoro"}) is job
    assert job.cancelled.is_set()
    assert job.cancel_reason is not None and "timed out" in job.cancel_reason


def test_an_expired_job_on_another_engine_is_dropped_without_waiting_for_a_switch(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = FairQueue(roomy(engine_switch_max_wait_s=60.0), clock)
    vox = queue.add(fake_job(loop, "b", engine="voxcpm", deadline=1.0))
    kok = queue.add(fake_job(loop, "a", engine="kokoro"))
    queue.charge(kok, 10.0)  # "b" is the least served key
    assert queue.pick({"kokoro"}) is kok  # below the switch bound
    clock.advance(1.0)
    assert queue.pick({"kokoro"}) is vox and vox.cancelled.is_set()


def test_a_key_arriving_in_another_keys_gap_between_requests_does_not_monopolise(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = FairQueue(roomy(), clock)
    first = queue.add(fake_job(loop, "a"))
    for _ in range(100):
        clock.advance(1.0)
        queue.charge(first, 1.0)
    queue.remove(first)  # "a" finished one request; its client sends the next one a moment later
    clock.advance(0.01)
    queue.add(fake_job(loop, "b"))  # "b" arrives in that gap
    clock.advance(0.01)
    queue.add(fake_job(loop, "a"))
    picks = []
    for _ in range(10):
        job = queue.pick({"kokoro"})
        assert job is not None
        picks.append(job.key)
        clock.advance(1.0)
        queue.charge(job, 1.0)
    assert picks.count("a") >= 4


def test_weights_must_be_positive() -> None:
    for weight in (0.0, -1.0):
        with pytest.raises(ValueError, match="weight"):
            SchedulingSettings(fairness_weights={"z": weight})
    with pytest.raises(ValueError, match="weight"):
        SchedulingSettings(fairness_default_weight=0.0)


def test_the_policy_shows_every_scheduling_setting_under_the_names_admin_scheduler_always_showed() -> None:
    settings = SchedulingSettings(fairness_weights={"a": 2.0}, max_inflight=12)
    assert FairQueue(settings, Clock(), shared_keys={"anonymous"}).policy() == {
        "default_weight": 1.0,
        "weights": {"a": 2.0},
        "idle_state_ttl_s": 300.0,
        "max_pending_per_key": 8,
        "max_pending_per_engine": 32,
        "engine_switch_max_wait_s": 5.0,
        "max_buffered_pieces": 8,
        "max_inflight": 12,
        "max_queued_chars": 20_000,
        "retry_after": 2.0,
        "stream_admission": True,
        "stream_gpu_share": 0.8,
        "short_step_s": 0.8,
        "stream_yield_s": 1.0,
        "short_step_word_cuts": False,
        "background_step_chars": 0,
        "stream_max_start_wait_s": 5.0,
        "slow_reader_lag_s": 10.0,
        "reader_idle_limit_s": 60.0,
        "max_client_share": 0.5,
        "shared_keys": frozenset({"anonymous"}),
        "max_idle_live": 128,
        "max_idle_live_per_client": 8,
        "max_tracked_keys": 256,
        "max_key_labels": 32,
        "max_retry_after_s": 30.0,
        "retry_grace_s": 5.0,
    }


def test_a_cancelled_job_is_dropped_first_even_behind_others(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(), clock)
    head = queue.add(fake_job(loop, "a"))
    behind = queue.add(fake_job(loop, "a"))
    late = queue.add(fake_job(loop, "b"))
    late.deadline = 5.0
    behind.cancel()
    assert queue.pick({"kokoro"}) is behind  # not head's turn yet, but dropping it costs nothing
    queue.remove(behind)
    clock.advance(6.0)
    assert queue.pick({"kokoro"}) is late and "timed out" in (late.cancel_reason or "")
    queue.remove(late)
    assert queue.pick({"kokoro"}) is head


# --------------------------------------------------------------------------------------------------------------------
# Streams: playback-aware order, admission by measured speed, slow readers, per-address share, key state caps
# --------------------------------------------------------------------------------------------------------------------

RATE = 24_000
GPU_PER_CHAR = 0.02  # a measured engine: 0.02 GPU seconds and 0.066 audio seconds per character
AUDIO_PER_CHAR = 0.066


def stream_job(
    loop: asyncio.AbstractEventLoop, key: str, units: Iterable[int] = (60, 120, 120), client: str | None = None
) -> Job:
    chunks = tuple(units)
    return Job(
        engine="kokoro",
        chars=sum(chunks),
        steps=fake_steps,
        loop=loop,
        key=key,
        streaming=True,
        sample_rate=RATE,
        unit_chars=chunks,
        client=client,
    )


def measured(queue: FairQueue, engine: str = "kokoro", steps: int = EngineSpeed.window) -> FairQueue:
    """The queue with `steps` steps of its engine measured (a whole window by default: the speed is settled)."""
    speed = queue.state.speeds.setdefault(engine, EngineSpeed())
    for _ in range(steps):
        speed.learn(100, 100 * GPU_PER_CHAR, 100 * AUDIO_PER_CHAR)
    return queue


def serve(queue: FairQueue, clock: Clock, resident: Iterable[str] = ("kokoro",)) -> Job:
    """Pick, run one step (its GPU time on the fake clock), hand its audio to a reader who takes it at once."""
    job = queue.pick(set(resident))
    assert job is not None
    queue.cut_step(job)  # as the scheduler does before each step
    chars = job.chars_left()[0] if job.chars_left() else job.chars
    seconds = chars * GPU_PER_CHAR
    clock.advance(seconds)
    if job.is_stream:
        audio = chars * AUDIO_PER_CHAR
        job.playback.delivered(audio)
        job.playback.sent(audio, produced_at=clock(), now=clock())
    job.units_done += 1
    queue.charge(job, seconds)
    if job.units_total is not None and job.units_done >= job.units_total:
        queue.remove(job)
    return job


@pytest.mark.parametrize("key", ["anonymous", "alice"])
def test_a_newcomer_of_the_same_key_starts_after_the_step_under_way(loop: asyncio.AbstractEventLoop, key: str) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(), clock))
    first = queue.add(stream_job(loop, key, units=[60] + [120] * 20))
    batch = queue.add(fake_job(loop, key, chars=5000))  # a long whole-file job of the same key, admitted before
    for _ in range(3):
        serve(queue, clock)
    newcomer = queue.add(stream_job(loop, key, units=(60, 120)))
    assert queue.pick({"kokoro"}) is newcomer  # not behind the first stream's whole text, nor the batch job
    assert first in queue.state.keys[key].jobs and batch in queue.state.keys[key].jobs


def test_newcomers_start_in_order_of_arrival_whatever_their_keys_and_weights(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(fairness_weights={"gold": 10.0}), clock))
    queue.add(fake_job(loop, "gold", chars=5000))
    jobs = [queue.add(stream_job(loop, key)) for key in ("anonymous", "gold", "anonymous", "bob")]
    assert [serve(queue, clock) for _ in jobs] == jobs


def test_a_stream_ahead_of_its_listener_yields_to_one_near_underrun_and_to_whole_file_work(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock(100.0)
    queue = measured(FairQueue(roomy(), clock))
    ahead = queue.add(stream_job(loop, "a", units=[60] + [120] * 10))
    near = queue.add(stream_job(loop, "b", units=[60] + [120] * 10))
    whole = queue.add(fake_job(loop, "c", chars=120))
    whole.unit_chars, whole.units_total = (120,), 1
    for job, in_hand in ((ahead, 30.0), (near, 1.0)):  # both started: a first piece sent, listeners playing
        job.units_done = 1
        job.playback.delivered(in_hand)
        job.playback.sent(in_hand, produced_at=clock(), now=clock())
    assert queue.pick({"kokoro"}) is near  # 1 s in hand < its next step (2.4 s) + the whole-file step + margin
    queue.charge(near, 0.0)
    near.playback.delivered(20.0)
    near.playback.sent(20.0, produced_at=clock(), now=clock())  # now 21 s in hand: no longer urgent
    assert queue.pick({"kokoro"}) is whole  # the stream far ahead yields to whole-file work
    queue.charge(whole, 2.4)
    queue.remove(whole)
    assert queue.pick({"kokoro"}) is near  # with nothing else to do, streams step ahead, the least ahead first
    queue.charge(near, 0.0)
    clock.advance(20.0)  # 21 s and 30 s in hand are now 1 s and 10 s
    assert queue.pick({"kokoro"}) is near
    queue.charge(near, 0.0)
    near.playback.delivered(50.0)
    near.playback.sent(50.0, produced_at=clock(), now=clock())
    assert queue.pick({"kokoro"}) is ahead


def test_two_to_one_weights_hold_for_busy_whole_file_work_while_streams_play(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(fairness_weights={"a": 2.0}), clock))
    streams = [queue.add(stream_job(loop, "listener", units=[60] + [120] * 40))]
    for key in ("a", "b"):
        for _ in range(40):
            job = queue.add(fake_job(loop, key, chars=120))
            job.unit_chars, job.units_total = (120,), 1
    served: collections.Counter[str] = collections.Counter()
    while clock() < 200.0:
        served[serve(queue, clock).key] += 1
    assert served["listener"] > 0 and all(s.underrun_s == 0 for s in streams)  # listeners never ran dry
    assert abs(served["a"] / served["b"] - 2.0) <= 0.1, served


def advance_serving(queue: FairQueue, clock: Clock, until: float) -> None:
    """Serve the queue on the fake clock until `until` (idle time passes when nothing can step)."""
    while clock() < until:
        if queue.pick({"kokoro"}) is None:
            clock.now = until
            return
        queue.state.running.clear()  # that pick was a look: serve picks again
        serve(queue, clock)


def two_streams_at_capacity(loop: asyncio.AbstractEventLoop, **settings: object) -> tuple[FairQueue, Clock, list[Job]]:
    """Two long streams admitted ten seconds apart and served for twenty: a third long one would not fit."""
    clock = Clock()
    queue = measured(FairQueue(roomy(stream_admission=True, stream_gpu_share=0.8, **settings), clock))
    admitted = [queue.add(stream_job(loop, "a", units=[60] + [120] * 30))]
    advance_serving(queue, clock, 10.0)
    admitted.append(queue.add(stream_job(loop, "b", units=[60] + [120] * 10)))
    advance_serving(queue, clock, 20.0)
    return queue, clock, admitted


LONG_UNITS = [60] + [120] * 30  # ~240 s of audio; 0.3 GPU seconds per audio second (0.38 at a 0.8 share)


def test_admission_refuses_a_stream_that_would_make_admitted_ones_run_dry_with_an_honest_retry_after(
    loop: asyncio.AbstractEventLoop,
) -> None:
    queue, clock, admitted = two_streams_at_capacity(loop)
    with pytest.raises(Busy) as err:  # a third would need 3 x 0.303 / 0.8 of the thread
        queue.add(stream_job(loop, "c", units=LONG_UNITS))
    assert err.value.status == 429 and err.value.code == "stream_capacity_full"
    assert "1.14x the GPU thread" in err.value.message
    assert queue.stats()["rejected_by_code"] == {"stream_capacity_full": 1}
    retry = err.value.retry_after
    assert retry is not None and 1.0 <= retry <= 60.0
    advance_serving(queue, clock, 20.0 + retry / 2)
    with pytest.raises(Busy):
        queue.add(stream_job(loop, "c", units=LONG_UNITS))  # before Retry-After: still no room
    advance_serving(queue, clock, 20.0 + retry)
    late = queue.add(stream_job(loop, "c", units=LONG_UNITS))  # retried after Retry-After: admitted
    advance_serving(queue, clock, 200.0)
    assert all(job.underrun_s == 0 for job in [*admitted, late])  # and nobody ran dry


def test_streams_refused_together_are_promised_successive_retry_times(loop: asyncio.AbstractEventLoop) -> None:
    queue, clock, _ = two_streams_at_capacity(loop, max_retry_after_s=1000.0)  # told their places' times in full
    retries = []
    for key in ("c", "d", "e"):
        with pytest.raises(Busy) as err:
            queue.add(stream_job(loop, key, units=LONG_UNITS))
        assert err.value.retry_after is not None
        retries.append(err.value.retry_after)
    # The GPU time one more such stream takes, with the margin promises keep between them.
    one_stream = sum(LONG_UNITS) * GPU_PER_CHAR / 0.8 * PROMISE_MARGIN
    assert retries[1] == pytest.approx(retries[0] + one_stream) and retries[2] == pytest.approx(retries[1] + one_stream)


def test_whole_file_work_and_short_streams_are_still_admitted_when_long_streams_are_refused(
    loop: asyncio.AbstractEventLoop,
) -> None:
    queue, clock, admitted = two_streams_at_capacity(loop)
    with pytest.raises(Busy):
        queue.add(stream_job(loop, "c", units=LONG_UNITS))
    whole = queue.add(fake_job(loop, "w", chars=300))  # whole-file work queues
    whole.unit_chars, whole.units_total = (120, 120, 60), 3
    short = queue.add(stream_job(loop, "d", units=(40,)))  # a one-sentence stream costs nobody a deadline
    advance_serving(queue, clock, 120.0)
    assert whole.units_done == 3  # served from what the streams left
    assert all(job.underrun_s == 0 for job in [*admitted, short])


def test_a_newcomer_is_refused_when_its_first_audio_would_wait_too_long_behind_other_first_steps(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(stream_admission=True, stream_gpu_share=1.0, stream_max_start_wait_s=3.0), clock))
    for i in range(3):  # first steps of 1.2 s each: the fourth would start 3.6 s from now
        queue.add(stream_job(loop, f"k{i}", units=(60,)))
    with pytest.raises(Busy) as err:
        queue.add(stream_job(loop, "k3", units=(60,)))
    assert err.value.code == "stream_capacity_full" and "would wait 3.6 s" in err.value.message
    assert err.value.retry_after is not None and err.value.retry_after >= 0.6


def test_before_its_first_step_an_engine_is_assumed_no_faster_than_real_time(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(stream_admission=True), clock)
    first = queue.add(stream_job(loop, "a", units=[40] + [120] * 20))
    with pytest.raises(Busy) as err:  # a second long stream: two streams at real time each cannot both keep up
        queue.add(stream_job(loop, "b", units=[60] + [120] * 20))
    assert err.value.code == "stream_capacity_full"
    short = queue.add(stream_job(loop, "c", units=(20,)))  # a one-step stream runs no risk
    assert queue.pick({"kokoro"}) is first
    clock.advance(40 * GPU_PER_CHAR)
    first.units_done = 1
    first.playback.delivered(40 * AUDIO_PER_CHAR)
    first.playback.sent(40 * AUDIO_PER_CHAR, produced_at=clock(), now=clock())
    queue.charge(first, 40 * GPU_PER_CHAR)
    queue.learn(first, 40 * GPU_PER_CHAR, 40 * AUDIO_PER_CHAR)  # measured: 0.3 GPU seconds per audio second
    assert queue.stats()["streams"]["speed"]["kokoro"] == {
        "gpu_s_per_audio_s": 0.303,
        "audio_s_per_char": 0.066,
        "steps_at_once": 1,
        "slowdown": [1.0],
        "capacity": 1.0,
    }
    advance_serving(queue, clock, 15.0)
    assert short.units_done == 1
    assert queue.add(stream_job(loop, "b", units=[60] + [120] * 20)) is not None


def test_a_reader_behind_real_time_releases_its_slot_and_one_that_takes_nothing_is_dropped(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(max_inflight=2, slow_reader_lag_s=5.0, reader_idle_limit_s=30.0), clock))
    slow = queue.add(stream_job(loop, "a", units=[60] * 10))
    queue.add(stream_job(loop, "b", units=[60] * 10))
    with pytest.raises(Busy):
        queue.add(stream_job(loop, "c"))
    slow.units_done, slow.delivered, slow.consumed = 1, 1, 1
    slow.playback.delivered(4.0)
    slow.playback.sent(4.0, produced_at=0.0, now=0.0)  # its writer is still sending this piece: it never asks again
    clock.advance(8.9)  # a real-time listener ran out at 4 s; 4.9 s behind
    with pytest.raises(Busy):
        queue.add(stream_job(loop, "c"))
    clock.advance(0.1)
    queue.add(stream_job(loop, "c", units=(60,)))  # 5 s behind: its slot is released
    assert slow.detached and queue.stats()["detached"] == 1 and queue.stats()["running"] + queue.stats()["waiting"] == 2
    for _ in range(2):  # "b" and the fresh one; a detached job whose writer does not ask gets no step
        job = queue.pick({"kokoro"})
        assert job is not None and job is not slow
        queue.charge(job, 0.0)
        queue.remove(job)
    assert queue.pick({"kokoro"}) is None
    clock.advance(21.0)  # 30 s since the reader took anything
    assert queue.pick({"kokoro"}) is slow and slow.cancelled.is_set()
    assert "took no audio for 30 s" in (slow.cancel_reason or "") and slow._discard_audio


def test_a_detached_reader_that_catches_up_steps_again_after_other_work(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(slow_reader_lag_s=1.0), clock))
    slow = queue.add(stream_job(loop, "a", units=[60] * 10))
    slow.units_done, slow.delivered, slow.consumed = 2, 2, 1
    slow.playback.delivered(8.0)
    slow.playback.sent(4.0, produced_at=0.0, now=0.0)  # one piece being sent, one waiting
    clock.advance(6.0)
    other = queue.add(fake_job(loop, "b"))
    assert slow.detached
    slow.playback.ask(clock())
    slow.playback.sent(4.0, produced_at=1.0, now=clock())
    slow.consumed = 2  # its reader took what waited, and is sending it
    assert queue.pick({"kokoro"}) is other
    queue.charge(other, 1.0)
    queue.remove(other)
    assert queue.pick({"kokoro"}) is None  # nothing waits, but its writer does not ask yet
    slow.playback.ask(clock())
    assert queue.pick({"kokoro"}) is slow  # now it does: one more step, from what is left


def test_one_client_address_holds_at_most_its_share_of_the_slots(loop: asyncio.AbstractEventLoop) -> None:
    queue = measured(FairQueue(roomy(max_inflight=4, max_client_share=0.5), Clock()))
    first = queue.add(fake_job(loop, "a"))
    first.client = "10.0.0.1"
    queue.remove(first)
    held = [queue.add(stream_job(loop, key, units=(60,), client="10.0.0.1")) for key in ("a", "b")]
    retries = []
    for key in ("a", "c"):  # another key from the same address is refused too
        with pytest.raises(Busy) as err:
            queue.add(stream_job(loop, key, units=(60,), client="10.0.0.1"))
        assert err.value.code == "client_queue_full" and "at most 2" in err.value.message
        retries.append(err.value.retry_after)
    # 1.2 s of work each: the first ends after 2.4 s; the second refusal is promised the slot after the first's.
    assert retries == pytest.approx([2.4, 2.4 + 1.2 * PROMISE_MARGIN])
    other = queue.add(fake_job(loop, "a"))
    other.client = "10.0.0.2"
    assert queue.add(stream_job(loop, "a", units=(60,), client="10.0.0.2")) is not None
    held[0].detached = True  # a response that no longer holds a slot does not count
    assert queue.add(stream_job(loop, "a", units=(60,), client="10.0.0.1")) is not None
    assert SchedulingSettings(max_inflight=1, max_client_share=0.1).max_per_client == 1  # never below one


def test_rejected_keys_create_no_state_and_key_states_and_labels_are_capped(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = FairQueue(roomy(max_inflight=1, max_tracked_keys=3, max_key_labels=2), clock)
    holder = queue.add(fake_job(loop, "holder"))
    for i in range(500):
        with pytest.raises(Busy):
            queue.add(fake_job(loop, f"random-{i}"))
    assert list(queue.state.keys) == ["holder"]
    stats = queue.stats()
    assert set(stats["keys"]) == {"holder", OTHER_KEYS} and stats["keys"][OTHER_KEYS]["rejected"] == 500
    assert stats["rejected"] == 500 and stats["rejected_by_code"] == {"server_busy": 500}
    queue.remove(holder)
    for i in range(10):  # ten keys admitted and finished one after the other
        clock.advance(1.0)
        queue.remove(queue.add(fake_job(loop, f"user-{i}")))
    queue.stats()  # like add and pick, applies the bound
    assert sorted(queue.state.keys) == ["user-7", "user-8", "user-9"]  # the three most recently active idle keys
    wide = FairQueue(roomy(max_key_labels=2), clock)
    for key, count in (("a", 1), ("b", 3), ("c", 2), ("d", 1)):
        for _ in range(count):
            wide.add(fake_job(loop, key))
    rows = wide.stats()["keys"]
    assert list(rows) == ["b", "c", OTHER_KEYS]  # the busiest keys one by one, the rest summed
    assert rows[OTHER_KEYS] == {"running": 0, "waiting": 2, "weight": None, "used_gpu_s": 0.0, "rejected": 0}


def live_job(loop: asyncio.AbstractEventLoop, key: str, client: str, text: list[str]) -> Job:
    """A live request: ready only once its client has sent text (`text` non-empty)."""
    job = fake_job(loop, key)
    job.client, job.streaming, job.ready = client, True, lambda: bool(text)
    return job


def test_live_requests_waiting_for_text_hold_no_admission_place(loop: asyncio.AbstractEventLoop) -> None:
    queue = FairQueue(roomy(max_pending_per_key=8, max_inflight=8), Clock(), shared_keys={"anonymous"})
    texts: list[list[str]] = [[] for _ in range(8)]
    idle = [queue.add(live_job(loop, "anonymous", "10.0.0.1", text)) for text in texts]
    # Eight open sessions that send nothing: every other client, and the same one, is still admitted.
    for client in ("10.0.0.2", "10.0.0.1"):
        job = fake_job(loop, "anonymous")
        job.client = client
        queue.add(job)
    stats = queue.stats()
    assert stats["awaiting_text"] == 8 and stats["waiting"] == 2
    texts[0].append("Hello.")  # one session gets text: it holds a place from now on
    assert idle[0].awaiting_input is False and queue.stats()["waiting"] == 3
    assert queue.pick({"kokoro"}) is not None


def test_live_requests_waiting_for_text_are_bounded_per_client_address_and_in_all(
    loop: asyncio.AbstractEventLoop,
) -> None:
    queue = FairQueue(roomy(max_idle_live=3, max_idle_live_per_client=2), Clock())
    for _ in range(2):
        queue.add(live_job(loop, "anonymous", "10.0.0.1", []))
    with pytest.raises(Busy) as err:
        queue.add(live_job(loop, "anonymous", "10.0.0.1", []))
    assert err.value.code == "live_sessions_full" and "this client address has 2" in err.value.message
    queue.add(live_job(loop, "anonymous", "10.0.0.2", []))  # another address: its own share
    with pytest.raises(Busy) as err:
        queue.add(live_job(loop, "anonymous", "10.0.0.3", []))
    assert err.value.code == "live_sessions_full" and "3 live requests wait for text" in err.value.message
    assert err.value.retry_after is not None and err.value.retry_after > 0
    queue.add(live_job(loop, "anonymous", "10.0.0.3", ["Hi."]))  # a session with text is ordinary work


def test_one_address_cannot_exhaust_the_anonymous_key_for_the_others(loop: asyncio.AbstractEventLoop) -> None:
    queue = FairQueue(roomy(max_pending_per_key=2), Clock(), shared_keys={"anonymous"})

    def from_(client: str, key: str = "anonymous") -> Job:
        job = fake_job(loop, key)
        job.client = client
        return job

    for _ in range(2):
        queue.add(from_("10.0.0.1"))
    with pytest.raises(Busy) as err:
        queue.add(from_("10.0.0.1"))
    assert err.value.code == "fairness_key_queue_full" and "from this client address" in err.value.message
    queue.add(from_("10.0.0.2"))  # the same key from another address
    queue.add(from_("10.0.0.3", key="team"))
    queue.add(from_("10.0.0.3", key="team"))
    with pytest.raises(Busy):  # a key of its own is one client's, wherever it comes from
        queue.add(from_("10.0.0.4", key="team"))


def refused_retries(queue: FairQueue, loop: asyncio.AbstractEventLoop, count: int) -> list[float]:
    """The Retry-After of `count` requests of 50 characters from keys of their own, each refused."""
    retries = []
    for index in range(count):
        with pytest.raises(Busy) as err:
            queue.add(fake_job(loop, f"client{index}", chars=50))
        assert err.value.retry_after is not None
        retries.append(err.value.retry_after)
    return retries


def test_refused_clients_that_obey_retry_after_come_back_in_the_order_they_came(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(max_inflight=1), clock))
    running = queue.add(fake_job(loop, "first", chars=50))  # 1 s of work at the measured speed
    retries = refused_retries(queue, loop, 20)
    # One slot each, one request's work apart (with the margin), in the order of refusal: never all at one instant.
    assert retries == sorted(retries) and retries[0] == pytest.approx(1.0)
    assert [b - a for a, b in zip(retries, retries[1:])] == pytest.approx([PROMISE_MARGIN] * 19)
    clock.advance(1.0)
    queue.remove(running)
    assert queue.add(fake_job(loop, "client0", chars=50)) is not None  # the first one back finds its slot


def test_a_live_request_seen_waiting_for_text_is_marked_so_its_listener_starts_again(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock(5.0)
    queue = FairQueue(roomy(), clock)
    text: list[str] = []
    job = queue.add(live_job(loop, "anonymous", "10.0.0.1", text))
    assert queue.pick({"kokoro"}) is None and job.input_waited_at == 5.0


def test_a_place_whose_client_does_not_come_back_lapses_and_the_places_behind_move_up(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    settings = roomy(max_inflight=1, retry_grace_s=5.0)
    queue = measured(FairQueue(settings, clock))
    queue.add(fake_job(loop, "first", chars=50))  # 1 s of work at the measured speed

    def refused(key: str) -> float | None:
        with pytest.raises(Busy) as err:
            queue.add(fake_job(loop, key, chars=50))
        return err.value.retry_after

    retries = refused_retries(queue, loop, 4)
    step = PROMISE_MARGIN
    assert retries == pytest.approx([1.0 + index * step for index in range(4)])
    # "client1" comes back when told: refused again (its place is still behind "client0"'s), it keeps its place.
    clock.advance(retries[1])
    assert refused("client1") == pytest.approx(1.0 + step)
    # "client0" never came back: its place lapses once it is the grace late, and every place behind it moves up.
    clock.advance(retries[0] + settings.retry_grace_s + 0.1 - clock())
    assert refused("late") == pytest.approx(1.0 + 3 * step)  # behind "client1", "client2" and "client3"
    assert refused("client1") == pytest.approx(1.0)  # back again: first in line now


def test_no_client_is_told_to_wait_longer_than_the_bound_and_a_crowd_beyond_it_comes_back_spread(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    settings = roomy(max_inflight=1, max_retry_after_s=30.0)
    queue = measured(FairQueue(settings, clock))
    queue.add(fake_job(loop, "first", chars=50))
    retries = refused_retries(queue, loop, 60)  # places 1.5 s apart: 90 s of them
    assert retries[:20] == pytest.approx([1.0 + index * PROMISE_MARGIN for index in range(20)])
    beyond = retries[20:]
    assert all(15.0 <= retry < 30.0 for retry in beyond)
    # 40 places over 60 s come back over 15 s: about 4 at any one instant, never all at once.
    assert max(collections.Counter(round(retry, 6) for retry in beyond).values()) <= 4


def test_a_flood_of_refused_clients_holds_a_bounded_number_of_places_and_every_one_lapses(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    settings = roomy(max_inflight=1)
    queue = measured(FairQueue(settings, clock))
    queue.add(fake_job(loop, "first", chars=50))
    for index in range(MAX_PLACES + 50):
        with pytest.raises(Busy) as err:
            queue.add(fake_job(loop, f"random-{index}", chars=50))
        assert err.value.retry_after is not None and err.value.retry_after <= settings.max_retry_after_s
    assert len(queue.admission.line) == MAX_PLACES  # those beyond it were told a time but hold no place
    clock.advance(settings.max_retry_after_s + settings.retry_grace_s + 1.0)
    refused_retries(queue, loop, 1)
    assert len(queue.admission.line) == 1  # every place of the flood lapsed: only the newcomer's is left


def obeying_crowd(settings: SchedulingSettings, loop: asyncio.AbstractEventLoop, no_shows: int) -> float:
    """After `no_shows` clients were refused at once and never came back, 200 clients from one address arriving
    together, each retrying after the Retry-After it gets (whole seconds, as the header says), on a GPU thread that
    runs each admitted request to its end (1 s each): when the last is served."""
    clock = Clock()
    queue = measured(FairQueue(settings, clock, shared_keys={"anonymous"}))

    def request() -> Job:
        job = fake_job(loop, "anonymous", chars=50)
        job.client = "127.0.0.1"
        return job

    queue.add(request())  # the request under way that the first refusals wait for
    for _ in range(no_shows):
        with pytest.raises(Busy):
            queue.add(request())
    arrivals = [(0.5 + index * 0.005, index) for index in range(200)]
    heapq.heapify(arrivals)
    running, ends_at, last_served = None, 0.0, 0.0
    while arrivals or queue.jobs():
        if running is None and (picked := queue.pick({"kokoro"})) is not None:
            running, ends_at = picked, max(clock(), ends_at) + 50 * GPU_PER_CHAR
        if running is not None and (not arrivals or ends_at <= arrivals[0][0]):
            clock.now = max(clock(), ends_at)
            queue.charge(running, 50 * GPU_PER_CHAR)
            queue.remove(running)
            last_served, running = clock(), None
            continue
        at, index = heapq.heappop(arrivals)
        clock.now = max(clock(), at)
        try:
            queue.add(request())
        except Busy as err:
            heapq.heappush(arrivals, (clock() + float(err.headers()["Retry-After"]), index))
    return last_served


def test_clients_obeying_retry_after_are_not_kept_waiting_by_clients_that_never_came_back(
    loop: asyncio.AbstractEventLoop,
) -> None:
    settings = roomy(max_inflight=1, max_retry_after_s=30.0, retry_grace_s=5.0)
    fresh = obeying_crowd(settings, loop, no_shows=0)
    after = obeying_crowd(settings, loop, no_shows=200)
    assert 200.0 <= fresh < 330.0  # 200 requests of 1 s, whose places in line are 1.5 s apart
    # The 200 places of the clients that never came back lapse within one window of the bound and the grace.
    assert after <= fresh + settings.max_retry_after_s + settings.retry_grace_s, (fresh, after)


# --------------------------------------------------------------------------------------------------------------------
# short steps and lanes
# --------------------------------------------------------------------------------------------------------------------

HARBOUR = (
    "The harbour opens at dawn as the light comes up. Fishing boats leave first, the ferries "
    "follow them out, and the cargo ships wait for the tide to turn. By noon the quay is quiet again, and the gulls "
    "have it to themselves."
)


def planned_stream(
    queue: FairQueue, loop: asyncio.AbstractEventLoop, key: str, text: str = HARBOUR, inside_clauses: bool = False
) -> tuple[Job, PlannedChunks]:
    """A stream of a real text admitted, planned as the service plans it (60 then 120 characters): its steps can be
    cut short (inside a clause too, with `inside_clauses`)."""
    chunks = PlannedChunks(chunk_text(text, 60, 120), inside_clauses)
    job = Job(
        engine="kokoro",
        chars=sum(chunks.unit_chars),
        steps=fake_steps,
        loop=loop,
        key=key,
        streaming=True,
        sample_rate=RATE,
        unit_chars=chunks.unit_chars,
        shorten=chunks.shorten,
        cuts=chunks.cut_steps,
    )
    return queue.add(job), chunks


def take_step(queue: FairQueue, clock: Clock, job: Job, chunks: PlannedChunks) -> Chunk:
    """The step `serve` would run for `job` (it must be the one picked), with the chunk its chunk source gives."""
    assert serve(queue, clock) is job
    taken = chunks.take()
    assert taken is not None
    return taken[0]


def test_a_stream_ahead_of_its_listener_takes_short_steps_cut_after_a_clause(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(short_step_s=0.8), clock))  # 0.8 s of GPU time: 40 characters here
    job, chunks = planned_stream(queue, loop, "a")
    planned = list(chunks.unit_chars)
    first = take_step(queue, clock, job, chunks)
    assert first.text == "The harbour opens at dawn as the light comes up."
    # 3.2 s in hand: the next chunk (102 characters, 2 s) is cut after its first clause, then after its second
    steps = [take_step(queue, clock, job, chunks) for _ in range(3)]
    assert [(c.text, c.pause) for c in steps] == [
        ("Fishing boats leave first,", "clause"),
        ("the ferries follow them out,", "clause"),
        ("and the cargo ships wait for the tide to turn.", "sentence"),
    ]
    assert job.unit_chars[:4] == (planned[0], 26, 28, 46) and job.units_total == len(job.unit_chars)


LONG_OPENING = (
    "Every morning before the market opens the fishermen who have worked through the night carry their crates up "
    "the narrow stone steps from the quay to the square. The gulls follow them."
)


def test_a_stream_ahead_of_its_listener_cuts_a_long_clause_at_word_gaps_so_no_step_outlasts_a_short_one(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(short_step_s=0.8), clock))  # 0.8 s of GPU time: 40 characters here
    job, chunks = planned_stream(queue, loop, "a", LONG_OPENING, inside_clauses=True)
    assert max(job.unit_chars) > 100  # planned whole, the clause's second part is one step of over 2 s
    steps = [take_step(queue, clock, job, chunks) for _ in range(2)]
    while job.units_done < (job.units_total or 0):
        steps.append(take_step(queue, clock, job, chunks))
    # After the first, no step is longer than a short step (a newcomer waits for no more), the last one aside: what
    # is left of the text, shorter than one and a half.
    assert [len(step.text) <= 40 for step in steps[1:-1]] == [True] * (len(steps) - 2) and len(steps[-1].text) <= 60
    assert [step.pause for step in steps[1:]].count("none") >= 2  # cut at word gaps: the joiner leaves a word gap
    assert " ".join(step.text for step in steps) == " ".join(c.text for c in chunk_text(LONG_OPENING, 60, 120))


def test_a_stream_gives_its_step_to_a_newcomer_while_its_listener_can_spare_it_then_ends_its_step_in_time(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(short_step_s=0.8, stream_yield_s=1.0), clock))
    job, chunks = planned_stream(queue, loop, "a", LONG_OPENING)  # clauses cut only after a clause
    take_step(queue, clock, job, chunks)  # its first 60 characters: 3.96 s in its listener's hand
    assert queue.pick({"kokoro"}) is job and not queue.cut_step(job)  # the rest of the long clause: one 1.9 s step
    chunks.take()
    clock.advance(1.3)  # its listener now holds 2.66 s
    whole = queue.add(fake_job(loop, "c", chars=100))
    live = queue.add(live_job(loop, "d", "10.0.0.4", []))
    assert not queue.yields_to(job, whole) and not queue.yields_to(job, live)  # no newcomer: one waiting for text
    newcomer = queue.add(stream_job(loop, "b", units=(40,)))  # its first step: 0.8 s
    assert queue.yields_to(job, newcomer)  # 2.66 s in hand covers it and 1 s more
    second = queue.add(stream_job(loop, "e", units=(60,)))
    assert not queue.yields_to(job, second)  # both first steps (2 s) and 1 s more: more than the listener holds
    queue.remove(second)
    assert not FairQueue(roomy(stream_yield_s=0.0), clock).yields_to(job, newcomer)  # off
    # Stopped before its audio: its chunk goes back, the newcomer steps, then the stream says the clause again, cut
    # at a word gap so that it ends while its listener still holds audio (1.86 s less 0.3 s of margin: 78 characters)
    queue.charge(job, 0.0)
    chunks.give_back()
    job.yielded = True
    queue.remove(whole)
    assert serve(queue, clock) is newcomer
    again = take_step(queue, clock, job, chunks)
    assert again.pause == "none" and len(again.text) <= 78, again
    rest = [take_step(queue, clock, job, chunks) for _ in range(len(job.chars_left()))]
    assert not job.yielded  # its listener's audio covered its next step again: cut as any stream's
    planned = [c.text for c in chunk_text(LONG_OPENING, 60, 120)]
    assert " ".join(c.text for c in [again, *rest]) == " ".join(planned[1:])
    background = fake_job(loop, "f")
    background.background = True
    assert queue.yields_to(background, whole)  # a background step yields to any interactive arrival


def test_a_stream_running_low_takes_its_whole_chunk_and_beside_another_step_a_shorter_one(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(short_step_s=0.8), clock, lanes=lambda engine: 2))
    job, chunks = planned_stream(queue, loop, "a")
    take_step(queue, clock, job, chunks)
    clock.advance(3.0)  # its listener now holds 0.2 s: less than two short steps
    assert take_step(queue, clock, job, chunks).text == (
        "Fishing boats leave first, the ferries follow them out, and the cargo ships wait for the tide to turn."
    )
    queue.add(fake_job(loop, "b", chars=120))
    assert queue.pick({"kokoro"}) is job and queue.runs_beside(job) and queue.cut_step(job)
    # Beside the batch step two steps at once take twice as long (nothing measured yet): 0.4 s alone, 20 characters.
    assert job.unit_chars[2:] == (32, 36)


def test_first_steps_whole_file_steps_and_single_clauses_are_never_cut(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(short_step_s=0.1), clock))
    plain = "Go now. Every word of this sentence belongs to one phrase so nothing in it can be cut at all."
    job, chunks = planned_stream(queue, loop, "a", HARBOUR)
    assert take_step(queue, clock, job, chunks) == chunk_text(HARBOUR, 60, 120)[0]  # the first step: the newcomer's
    assert job.unit_chars == tuple(len(c.text) for c in chunk_text(HARBOUR, 60, 120))
    queue.remove(job)
    whole = PlannedChunks(chunk_text(HARBOUR, 60, 120))
    batch = Job(
        engine="kokoro",
        chars=len(HARBOUR),
        steps=fake_steps,
        loop=loop,
        key="b",
        sample_rate=RATE,
        unit_chars=whole.unit_chars,
        shorten=whole.shorten,
    )
    queue.add(batch)
    for _ in range(2):
        assert queue.pick({"kokoro"}) is batch and not queue.cut_step(batch)  # a whole-file job keeps its chunks
        queue.charge(batch, 0.0)
        batch.units_done += 1
    assert batch.unit_chars == whole.unit_chars
    queue.remove(batch)
    lone, clauses = planned_stream(queue, loop, "c", plain)
    take_step(queue, clock, lone, clauses)
    assert take_step(queue, clock, lone, clauses).text.startswith("Every word")  # one clause: nowhere to cut
    short_clause, rest = planned_stream(queue, loop, "d", "Stop. A phrase that is one clause only.")
    take_step(queue, clock, short_clause, rest)
    assert take_step(queue, clock, short_clause, rest).text == "A phrase that is one clause only."


def test_two_lanes_step_two_jobs_at_once_never_one_job_twice_and_measure_the_overlap(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(), clock, lanes=lambda engine: 2 if engine == "kokoro" else 1))
    a = queue.add(fake_job(loop, "a"))
    b = queue.add(fake_job(loop, "b"))
    vox = queue.add(fake_job(loop, "c", engine="voxcpm"))
    assert queue.pick({"kokoro"}) is a and queue.runs_beside(a)  # b is ready too: both on a share of the threads
    assert queue.pick({"kokoro"}) is b and queue.runs_beside(b)  # beside it, on the second lane
    assert queue.pick({"kokoro", "voxcpm"}) is None  # both lanes busy; another engine never runs beside them
    clock.advance(1.0)
    assert queue.charge(a, 1.0) == 2.0  # two steps at once all the while
    assert queue.pick({"kokoro"}) is a  # a lane is free again: its next step
    clock.advance(1.0)
    assert queue.charge(b, 2.0) == pytest.approx(2.0)
    clock.advance(2.0)
    assert queue.charge(a, 3.0) == pytest.approx(4.0 / 3.0)  # one second beside b, two alone
    clock.advance(10.0)  # voxcpm's request has waited past the switch bound
    assert queue.pick({"kokoro"}) is vox  # nothing runs: the switch may happen


def test_beside_a_newcomers_first_step_only_streams_about_to_run_dry_start(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(), clock, lanes=lambda engine: 3))
    streams = []
    for key, in_hand in (("ahead", 30.0), ("tight", 3.0)):  # next steps of 2.4 s: 27.6 s and 0.6 s to spare
        job = queue.add(stream_job(loop, key, units=[60] + [120] * 10))
        job.units_done = 1
        job.playback.delivered(in_hand)
        job.playback.sent(in_hand, produced_at=clock(), now=clock())
        streams.append(job)
    ahead, tight = streams
    whole = queue.add(fake_job(loop, "w", chars=120))
    newcomer = queue.add(stream_job(loop, "n", units=(60, 120)))
    assert queue.pick({"kokoro"}) is newcomer
    assert queue.pick({"kokoro"}) is tight  # it could not wait the 1.2 s of the newcomer's first step
    assert queue.pick({"kokoro"}) is None  # a lane is free, but the first audio keeps the machine's speed
    clock.advance(1.2)
    queue.charge(newcomer, 1.2)
    newcomer.units_done = 1
    newcomer.playback.delivered(60 * AUDIO_PER_CHAR)
    newcomer.playback.sent(60 * AUDIO_PER_CHAR, produced_at=clock(), now=clock())
    assert queue.pick({"kokoro"}) is newcomer  # its second step, soon needed
    assert queue.pick({"kokoro"}) is whole  # beside later steps any work may run: whole-file work before "ahead"


def test_admission_keeps_a_second_stream_out_until_two_steps_at_once_are_measured_faster(
    loop: asyncio.AbstractEventLoop,
) -> None:
    story = HARBOUR * 8  # about 110 s of audio each, in clauses short steps can end at

    def queue_with(slowdown: float | None) -> FairQueue:
        clock = Clock()
        queue = FairQueue(roomy(stream_admission=True, stream_gpu_share=0.8), clock, lanes=lambda engine: 2)
        speed = queue.state.speeds.setdefault("kokoro", EngineSpeed())
        for _ in range(EngineSpeed.window):  # 0.45 GPU seconds per audio second alone, as on the 2-core machine
            speed.learn(100, 100 * BOX_GPU_PER_CHAR, 100 * AUDIO_PER_CHAR)
            if slowdown is not None:
                speed.learn(100, 100 * BOX_GPU_PER_CHAR * slowdown, 100 * AUDIO_PER_CHAR, overlap=2.0)
        playing, _ = planned_stream(queue, loop, "a", story)
        playing.units_done = 3  # well into it: its listener holds 20 s
        playing.playback.delivered(20.0)
        playing.playback.sent(20.0, produced_at=clock(), now=clock())
        return queue

    with pytest.raises(Busy) as err:  # two streams need 2 x 0.45 / 0.8 of one lane: more than it has
        planned_stream(queue_with(None), loop, "b", story)
    assert err.value.code == "stream_capacity_full"
    with pytest.raises(Busy):  # measured: two steps at once take twice as long each, nothing gained
        planned_stream(queue_with(2.0), loop, "b", story)
    with pytest.raises(Busy):  # 1.7 times as long: +18 %, not enough for two at 0.45 each within 0.8 of the machine
        planned_stream(queue_with(1.7), loop, "b", story)
    gained = queue_with(1.4)  # two steps at once take 1.4 times as long: 1.43 lanes' worth of work a second
    assert gained.stats()["streams"]["speed"]["kokoro"]["capacity"] == 1.429
    assert planned_stream(gained, loop, "b", story)[0] is not None


SENTENCE_180 = (
    "The morning mist lifted slowly from the river across the valley, the farmers walked out to the fields, and the "
    "first trains of the day rolled over the iron bridge toward the city."
)
ONE_SENTENCE = "The quick brown fox jumps over the lazy dog near the riverbank."
BOX_GPU_PER_CHAR = 0.0297  # the 2-core machine: 0.45 GPU seconds per audio second alone
BOX_SLOWDOWN = 1.68  # and two steps at once take 1.68 times as long each (+19 % audio per second)


@pytest.mark.parametrize("lanes", [1, 2])
def test_another_clients_sentence_is_admitted_while_a_180_character_one_streams_and_neither_runs_dry(
    loop: asyncio.AbstractEventLoop, lanes: int
) -> None:
    """Steps run as the scheduler runs them on the fake clock (taking the box's measured speeds): the newcomer waits
    for a short step of the stream playing, whose listener keeps enough in hand."""
    clock = Clock()
    queue = FairQueue(roomy(stream_admission=True), clock, lanes=lambda e: lanes, shared_keys={"anonymous"})
    speed = queue.state.speeds.setdefault("kokoro", EngineSpeed())
    for _ in range(EngineSpeed.window):
        speed.learn(100, 100 * BOX_GPU_PER_CHAR, 100 * AUDIO_PER_CHAR)
        speed.learn(100, 100 * BOX_GPU_PER_CHAR * BOX_SLOWDOWN, 100 * AUDIO_PER_CHAR, overlap=2.0)
    sources: dict[Job, PlannedChunks] = {}
    under_way: dict[Job, float] = {}  # when each step under way ends

    def admit(text: str, client: str) -> Job:
        job, chunks = planned_stream(queue, loop, "anonymous", text)
        job.client, sources[job] = client, chunks
        return job

    def start_steps() -> None:
        while (job := queue.pick({"kokoro"})) is not None:
            queue.cut_step(job)
            slowdown = BOX_SLOWDOWN if len(queue.state.running) > 1 else 1.0
            under_way[job] = clock() + job.chars_left()[0] * BOX_GPU_PER_CHAR * slowdown

    def end_a_step() -> None:
        job = min(under_way, key=under_way.__getitem__)
        clock.now = max(clock.now, under_way.pop(job))
        audio = job.chars_left()[0] * AUDIO_PER_CHAR
        sources[job].take()
        job.playback.delivered(audio)
        job.playback.sent(audio, produced_at=clock(), now=clock())
        job.playback.ask(clock())  # its writer sent it at once and waits for more
        job.units_done += 1
        queue.charge(job, 0.0)
        if job.units_done >= (job.units_total or 0):
            queue.remove(job)

    first = admit(SENTENCE_180, "10.0.0.1")
    start_steps()
    end_a_step()  # its first audio
    start_steps()
    clock.advance(1.0)  # a second into it, another client's sentence
    second = admit(ONE_SENTENCE, "10.0.0.2")
    while under_way or queue.jobs():
        start_steps()
        end_a_step()
    assert first.underrun_s == 0 and second.underrun_s == 0


def test_a_step_that_starts_alone_keeps_every_thread_and_company_waits_unless_it_would_run_dry(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    queue = measured(FairQueue(roomy(), clock, lanes=lambda engine: 2))
    alone = queue.add(fake_job(loop, "a", chars=120))
    assert queue.pick({"kokoro"}) is alone and not queue.runs_beside(alone)  # nothing else to run: all the threads
    later = queue.add(fake_job(loop, "b", chars=120))
    ahead = queue.add(stream_job(loop, "c", units=[60] + [120] * 10))
    ahead.units_done = 1
    ahead.playback.delivered(30.0)
    ahead.playback.sent(30.0, produced_at=clock(), now=clock())
    assert queue.pick({"kokoro"}) is None  # a two-thread step beside one-thread ones makes less audio than either
    clock.advance(2.0)
    queue.charge(alone, 2.0)
    queue.remove(alone)  # its last step
    first = queue.pick({"kokoro"})
    assert first in (later, ahead) and queue.runs_beside(first)  # two ready: they start together, threads shared
    second = queue.pick({"kokoro"})
    assert second is not first and second in (later, ahead) and queue.runs_beside(second)


def test_admission_learns_the_speed_of_the_route_it_runs_so_a_faster_one_admits_more_streams(
    loop: asyncio.AbstractEventLoop,
) -> None:
    def admitted_streams(gpu_per_char: float) -> tuple[int, float]:
        """Long streams admitted at once by a queue that learned its engine's speed from steps of `gpu_per_char`
        (through `learn`, as the scheduler reports each step), and the real-time factor it learned."""
        queue = FairQueue(roomy(stream_admission=True, stream_gpu_share=0.8), Clock())
        learner = stream_job(loop, "learner", units=[100] * (EngineSpeed.window + 1))
        for done in range(1, EngineSpeed.window + 1):
            learner.units_done = done
            queue.learn(learner, 100 * gpu_per_char, 100 * AUDIO_PER_CHAR)
        count = 0
        for index in range(10):
            try:
                queue.add(stream_job(loop, f"k{index}", units=LONG_UNITS))
            except Busy:
                break
            count += 1
        return count, queue.state.speed("kokoro").real_time_factor

    slow, slow_rtf = admitted_streams(GPU_PER_CHAR)  # the int8 route: 0.30 GPU s per audio s
    fast, fast_rtf = admitted_streams(GPU_PER_CHAR / 1.6)  # a route 1.6 times as fast, as bf16 measured
    assert fast_rtf == pytest.approx(slow_rtf / 1.6)
    # Arriving together, with no audio in hand yet: on the slower route a second stream would make the first run
    # dry, on the faster one a third.
    assert (slow, fast) == (1, 2)
