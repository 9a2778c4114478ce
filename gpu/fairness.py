"""The fair queue in front of the GPU thread: who steps next, and who is admitted. Pure bookkeeping: no threads,
a clock that tests can drive.

Its ideas have a module each: its bookkeeping (`gpu.queue_state`: each key's jobs and used GPU time, the steps under
way, each engine's speed), admission and Retry-After (`gpu.admission`), the order of steps and short steps
(`gpu.ordering`), readers that fall behind (`gpu.slow_readers`) and what it reports (`gpu.queue_stats`). The queue
holds them together: one lock, so the event loop (admission) and the GPU thread (picks and charges) see each
operation whole, and one clock, read once per operation. Its weights and bounds are the `SchedulingSettings`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from gpu import ordering, queue_stats
from gpu.admission import Admission
from gpu.jobs import Job
from gpu.playback import EngineSpeed
from gpu.queue_state import QueueState
from gpu.scheduling_settings import SchedulingSettings
from gpu.slow_readers import sweep


class FairQueue:
    """Which job steps next, and which is admitted. Pure bookkeeping: no threads, a clock that tests can drive."""

    def __init__(
        self,
        settings: SchedulingSettings,
        clock: Callable[[], float] = time.monotonic,
        lanes: Callable[[str], int] = lambda engine: 1,
        shared_keys: Collection[str] = frozenset(),
    ) -> None:
        """`lanes`: how many steps an engine runs at once (1 for all but ONNX Runtime on a CPU node).
        `shared_keys`: fairness keys that unrelated clients share (the anonymous key of a node without API keys),
        whose `max_pending_per_key` counts per client address."""
        self.settings = settings
        self.clock = clock
        self.state = QueueState(settings, lanes, clock())
        self.admission = Admission(self.state, frozenset(shared_keys))
        self._lock = threading.Lock()

    def add(self, job: Job) -> Job:
        """Admit a job, or raise Busy (429) naming the bound it hit, with a Retry-After computed from the work
        ahead of it."""
        with self._lock:
            now = self.clock()
            self._tidy(now)
            self.admission.check(job, now)
            return self.state.admit(job, now)

    def remove(self, job: Job) -> None:
        with self._lock:
            self.state.remove(job, self.clock())

    def charge(self, job: Job, seconds: float) -> float:
        """The job's step ended after `seconds`: charged to its key. Returns how many steps ran at once on average
        while it ran (itself included)."""
        with self._lock:
            return self.state.charge(job, seconds, self.clock())

    def learn(self, job: Job, gpu_s: float, audio_s: float, overlap: float = 1.0) -> None:
        """The job's last step took `gpu_s` and made `audio_s` of audio, with `overlap` steps at once on average
        (`charge`): how its engine's speed is measured."""
        chars = job.unit_chars[job.units_done - 1] if 0 < job.units_done <= len(job.unit_chars) else 0
        if not chars and job.units_total:
            chars = job.chars // job.units_total
        with self._lock:
            self.state.speeds.setdefault(job.engine, EngineSpeed()).learn(chars, gpu_s, audio_s, overlap)

    def cut_step(self, job: Job) -> bool:
        """Cut the next step of a job just picked short: to about `short_step_s` beside the steps under way when it is
        a stream ahead of its listener (a newcomer arriving now would wait for it: `gpu.ordering.short_step_chars`),
        and, once it gave a step to a newcomer, to what ends in time for its listener until its listener's audio
        covers its steps again (`gpu.ordering.chars_in_time`); whether it was."""
        with self._lock:
            now = self.clock()
            chars = ordering.short_step_chars(self.state, job, now)
            cut = chars is not None and job.cut_next_step(chars)
            if job.yielded and ordering.ends_in_time(self.state, job, now):
                job.yielded = False  # its listener's audio covers its steps again
            elif job.yielded and (in_time := ordering.chars_in_time(self.state, job, now)) is not None:
                cut = job.cut_next_step(in_time, inside_clauses=True) or cut
            return cut

    def yields_to(self, job: Job, arrival: Job | None) -> bool:
        """Whether the step under way of `job` is stopped for `arrival` and said again after it
        (`gpu.ordering.yields_to`)."""
        with self._lock:
            return ordering.yields_to(self.state, job, arrival, self.clock())

    def record_stall(self, job: Job, seconds: float) -> None:
        with self._lock:
            self.state.record_stall(job.engine, seconds)

    def pick(self, resident: Collection[str]) -> Job | None:
        """The job that steps next (`gpu.ordering`), among jobs that can step now: beside the steps under way, when
        their engine runs several at once."""
        with self._lock:
            now = self.clock()
            self._tidy(now)
            return ordering.pick(self.state, resident, now)

    def runs_beside(self, job: Job) -> bool:
        """Whether the job's step under way runs beside others (on a share of the engine's threads)."""
        with self._lock:
            step = self.state.running.get(job)
            return step is not None and step.beside

    def jobs(self) -> list[Job]:
        """Every admitted job, now."""
        with self._lock:
            return self.state.admitted()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self._tidy(self.clock())
            return queue_stats.stats(self.state)

    def policy(self) -> dict[str, Any]:
        """The weights and bounds the queue applies (/admin/scheduler)."""
        return queue_stats.policy(self.settings, self.admission.shared_keys)

    def _tidy(self, now: float) -> None:
        """Before a decision: keys idle too long forgotten, readers behind real time detached or dropped."""
        self.state.expire(now)
        sweep(self.state.admitted(), self.settings, now)
