"""The fair queue's bookkeeping: each key's admitted jobs and the GPU time it used, the steps under way, each engine's
measured speed, and what was refused or ran dry; with the estimates of GPU time that admission (`gpu.admission`) and
ordering (`gpu.ordering`) both read from it. It decides nothing, and keeps no clock: each operation is told the
time."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from gpu.jobs import Job
from gpu.playback import EngineSpeed, Pool
from gpu.scheduling_settings import SchedulingSettings


@dataclass
class StepUnderWay:
    """A step picked and not charged yet."""

    since: float
    lane_seconds: float
    """`QueueState._lane_seconds` when it began: how many steps ran at once while it ran."""
    beside: bool
    """It runs beside other steps (on a share of the engine's threads), or alone (on all of them)."""


@dataclass
class KeyState:
    """One key's jobs, in order of admission, and the GPU time it has used."""

    jobs: collections.deque[Job] = field(default_factory=collections.deque)
    used: float = 0.0
    """GPU seconds used (forgotten after idle_state_ttl_s idle)."""
    virtual: float = 0.0
    """Used time divided by weight: the key with the least goes next."""
    last_active: float = 0.0
    last_served: float = 0.0
    rejected: int = 0


class QueueState:
    """Every admitted job by key, the steps under way, each engine's speed and the queue's counters."""

    def __init__(self, settings: SchedulingSettings, lanes: Callable[[str], int], now: float) -> None:
        self.settings = settings
        self.lanes = lanes
        """How many steps an engine runs at once (1 for all but ONNX Runtime on a CPU node)."""
        self.keys: dict[str, KeyState] = {}
        self.speeds: dict[str, EngineSpeed] = {}
        self.rejected_by_engine: collections.Counter[str] = collections.Counter()
        self.rejected_by_code: collections.Counter[str] = collections.Counter()
        self.rejected_total = 0
        self.rejected_untracked = 0
        """Rejections of keys that had no state: counted here, creating none."""
        self.underrun_s: dict[str, float] = {}
        self.underruns: collections.Counter[str] = collections.Counter()
        # The least weighted service any busy key had when a step was last picked; it never goes down. A key that
        # becomes busy starts here, so neither idle time nor arriving in another key's gap buys it credit.
        self.floor = 0.0
        self.running: dict[Job, StepUnderWay] = {}
        """The jobs whose step is under way (picked, not yet charged)."""
        self._lane_seconds = 0.0
        """Steps under way integrated over time (seconds of one step each): how many ran at once during a step."""
        self._lanes_counted_at = now
        self._ids = itertools.count(1)

    def admitted(self) -> list[Job]:
        """Every admitted job, key by key, each key's in order of admission."""
        return [j for state in self.keys.values() for j in state.jobs]

    def admit(self, job: Job, now: float) -> Job:
        """Queue an admitted job behind its key's others."""
        state = self.keys.get(job.key)
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

    def count_rejection(self, job: Job, code: str) -> None:
        """A job refused with `code`: counted for its engine and its key, creating no key state."""
        state = self.keys.get(job.key)
        self.rejected_total += 1
        self.rejected_by_engine[job.engine] += 1
        self.rejected_by_code[code] += 1
        if state is not None:
            state.rejected += 1
        else:
            self.rejected_untracked += 1

    def remove(self, job: Job, now: float) -> None:
        state = self.keys.get(job.key)
        if state is not None and job in state.jobs:
            state.jobs.remove(job)
            state.last_active = now
        self.end_step(job, now)

    def charge(self, job: Job, seconds: float, now: float) -> float:
        """The job's step ended after `seconds`: charged to its key. Returns how many steps ran at once on average
        while it ran (itself included)."""
        state = self.keys.get(job.key)
        if state is not None:
            state.used += seconds
            if not job.background:  # background steps run in time nobody else wanted: they cost a key no share
                state.virtual += seconds / self.settings.weight(job.key)
            state.last_served = state.last_active = job.last_served_at = now
        overlap = self.end_step(job, now)
        self.raise_floor()
        return overlap

    def record_stall(self, engine: str, seconds: float) -> None:
        """A stream of `engine` ran dry for `seconds`."""
        self.underrun_s[engine] = self.underrun_s.get(engine, 0.0) + seconds
        self.underruns[engine] += 1

    def begin_step(self, job: Job, now: float, beside: bool) -> Job:
        self._count_lanes(now)
        self.running[job] = StepUnderWay(now, self._lane_seconds, beside)
        return job

    def end_step(self, job: Job, now: float) -> float:
        """The job's step is over: how many steps ran at once on average while it ran (itself included)."""
        if job not in self.running:
            return 1.0
        self._count_lanes(now)
        step = self.running.pop(job)
        if now <= step.since:
            return float(len(self.running) + 1)
        return max(1.0, (self._lane_seconds - step.lane_seconds) / (now - step.since))

    def _count_lanes(self, now: float) -> None:
        self._lane_seconds += len(self.running) * max(0.0, now - self._lanes_counted_at)
        self._lanes_counted_at = now

    def raise_floor(self) -> None:
        busy = [s.virtual for s in self.keys.values() if s.jobs]
        if busy:
            self.floor = max(self.floor, min(busy))

    def expire(self, now: float) -> None:
        """Forget keys idle for `idle_state_ttl_s`, and the longest idle beyond `max_tracked_keys`."""
        ttl = self.settings.idle_state_ttl_s
        for key in [k for k, s in self.keys.items() if not s.jobs and now - s.last_active >= ttl]:
            del self.keys[key]
        idle = [(s.last_active, k) for k, s in self.keys.items() if not s.jobs]
        if len(idle) > self.settings.max_tracked_keys:
            for _, key in sorted(idle)[: len(idle) - self.settings.max_tracked_keys]:
                del self.keys[key]

    def speed(self, engine: str) -> EngineSpeed:
        speed = self.speeds.get(engine)
        return speed if speed is not None else EngineSpeed()

    def pool(self, engine: str) -> Pool:
        """The engine's lanes as admission plans them: their measured slowdown under overlap (none gained until
        measured), and the short steps of streams ahead of their listeners."""
        return Pool(self.speed(engine).slowdown(max(1, self.lanes(engine))), short_lead=self.settings.short_step_s)

    def work_left_s(self, job: Job) -> float:
        """Estimated GPU seconds of the job's steps not yet finished."""
        return sum(job.chars_left()) * self.speed(job.engine).gpu_s_per_char

    def next_step_s(self, job: Job) -> float:
        """Estimated GPU seconds of the job's next step."""
        left = job.chars_left()
        return left[0] * self.speed(job.engine).gpu_s_per_char if left else 0.0

    def slack(self, job: Job, now: float) -> float:
        """How long the stream can wait before its next step would start too late for its listener."""
        return (job.playback.in_hand(now) or 0.0) - self.next_step_s(job)
