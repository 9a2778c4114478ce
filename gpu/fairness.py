"""The fair queue in front of the GPU thread: who steps next, and who is admitted. Pure bookkeeping: no threads,
a clock that tests can drive.

A chunk is one whole generation of engines that cannot interleave (VoxCPM's single KV cache), so a step is one
text chunk and two generations never share a model. Who steps next (`FairQueue.pick`), after dropping cancelled
jobs:
1. the first step of a stream not yet started, in order of arrival, whatever its key: a newcomer waits for at
   most the step under way (and the first steps of streams that arrived just before it);
2. a running stream about to run dry: its listener's audio in hand (`playback.Playback`) no longer covers its next
   step, the longest whole-file step that could run first and `stream_max_start_wait_s` of newcomers' first
   steps; the one closest to running dry goes first;
3. whole-file work (`/tts`, batch), by weighted fair share between keys: the key with the least GPU time used
   divided by its weight; a key's whole-file jobs keep their order;
4. streams far ahead of their listeners, closest to running dry first;
5. responses whose readers fell behind real time (detached), once their writer has sent all their audio and asks
   for more.
A key that becomes busy starts level with the least-served busy key (no credit for having been idle), and its
used time is forgotten once it has been idle for `idle_state_ttl_s`. While one engine is resident, the resident
engine keeps the thread as long as it has work, until another engine's oldest request has waited
`engine_switch_max_wait_s`.

An engine that runs several steps at once (`lanes`: ONNX Runtime on a CPU node) gets the next step picked while
its steps run, up to that many, of its own jobs only (a job takes one step at a time). Its steps run either alone,
on all its threads, or beside each other, each on a share of them: a step starts beside others when another job is
ready to start with it, and beside a step alone only streams that would run dry before it ends start. A newcomer's
first step takes the first lane free, with all the threads (beside what is left of the short steps under way), and
nothing else starts while one waits. Every other engine runs one step at a time, and another engine's step waits
until the steps under way are done.

A newcomer thus waits for the steps under way: a stream ahead of its listener takes a short step (`cut_step`: its
chunk cut after a clause, about `short_step_s` long, beside the other steps under way), and its whole chunk again
when it runs low (its listener holds less than a short step: it runs dry whatever it takes, and the whole chunk
makes the most audio per GPU second).

Admission (`FairQueue.add`) refuses with 429 what would exceed a bound: per key (per client address within a key
that unrelated clients share), per engine, in flight, characters waiting, per client address, and for streams the
real-time capacity (`playback.admission`: the engine's measured speed and the audio promised to admitted streams).
A live request waiting for text holds none of those places: live requests waiting for text have bounds of their
own, in all and per client address. A response whose reader falls behind real time stops holding a slot, and one
whose reader takes nothing for `reader_idle_limit_s` is dropped. A rejection creates no key state; its Retry-After
is when the work ahead should have made room, one promised slot per refusal after another."""

from __future__ import annotations

import bisect
import collections
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from errors import Busy
from gpu.jobs import Job
from gpu.playback import EngineSpeed, Pool, Refusal, StreamDemand, admission

log = logging.getLogger("polytts.scheduler")

MIN_SLOT_S = 0.25
"""The least time between two retries promised to refused requests."""
PROMISE_MARGIN = 1.5
"""Promised retries are this much further apart than the estimate of each request's GPU time: one back too early is
refused again, while one back a little late costs nothing as long as the other admitted requests keep the thread
busy (short texts cost more than their characters say)."""
MAX_RETRY_AFTER_S = 30.0
"""The longest Retry-After promised behind other promises while the engine's speed is not settled (a bound's own
estimate may be longer)."""
MAX_PROMISES = 10_000
"""Retry times remembered at once (a flood of refusals forgets its latest first)."""
OTHER_KEYS = "(other)"
"""The row under which keys beyond `max_key_labels`, and rejected keys that have no state, are summed."""


@dataclass
class FairnessPolicy:
    """The fair queue's weights and bounds (built from the settings)."""

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
    """Retry-After where the work ahead cannot be estimated (live requests waiting for text)."""
    stream_admission: bool = True
    """Refuse streams that the GPU thread could not keep in real time (off: streams are admitted by the count
    bounds only, and may run dry under load)."""
    stream_gpu_share: float = 0.8
    """Admission plans streams with this share of the GPU thread; the rest absorbs misestimates and whole-file work."""
    short_step_s: float = 0.8
    """A stream ahead of its listener (one such step in hand) takes a step of about this long (beside the other steps
    under way), cut after a clause, instead of its whole chunk, so a newcomer waits no longer; 0: never cut."""
    stream_max_start_wait_s: float = 5.0
    """A stream whose first step would start this long after the step under way (behind other streams' first
    steps) is refused. Running streams keep this much lead over their listeners before whole-file work goes first,
    so newcomers' first steps never make them run dry."""
    slow_reader_lag_s: float = 10.0
    """A stream whose reader is this far behind real time (audio waiting for it) stops holding an admission slot."""
    reader_idle_limit_s: float = 60.0
    """A response whose reader has taken no audio for this long, while audio waited for it, is dropped."""
    max_client_share: float = 0.5
    """Share of `max_inflight` one client address may hold (at least one slot)."""
    shared_keys: frozenset[str] = frozenset()
    """Keys that unrelated clients share (the anonymous key of a node without API keys): `max_pending_per_key`
    counts per client address within them."""
    max_idle_live: int = 128
    """Live requests that may wait for text at once, in all."""
    max_idle_live_per_client: int = 8
    """Live requests one client address may have waiting for text at once."""
    max_tracked_keys: int = 256
    """Idle keys whose used GPU time is remembered; beyond it the longest idle are forgotten first."""
    max_key_labels: int = 32
    """Keys listed one by one in stats and metrics (busiest first); the rest are summed under OTHER_KEYS."""

    def __post_init__(self) -> None:
        if not self.default_weight > 0 or any(not weight > 0 for weight in self.weights.values()):
            raise ValueError("every fairness weight must be above 0")
        if not 0 < self.stream_gpu_share <= 1 or not 0 < self.max_client_share <= 1:
            raise ValueError("stream_gpu_share and max_client_share must be above 0 and at most 1")

    def weight(self, key: str) -> float:
        return self.weights.get(key, self.default_weight)

    @property
    def max_per_client(self) -> int:
        return max(1, int(self.max_client_share * self.max_inflight))


@dataclass(frozen=True)
class Bound:
    """A bound a job would exceed: why, its error code, and the admitted jobs that fill it (whose ends make room)."""

    reason: str
    code: str
    holding: list[Job]
    retry_after: float | None = None
    """When to retry, where the bound computed it already (stream capacity)."""


@dataclass
class StepUnderWay:
    """A step picked and not charged yet."""

    since: float
    lane_seconds: float
    """`FairQueue._lane_seconds` when it began: how many steps ran at once while it ran."""
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


class FairQueue:
    """Which job steps next, and which is admitted. Pure bookkeeping: no threads, a clock that tests can drive."""

    def __init__(
        self,
        policy: FairnessPolicy,
        clock: Callable[[], float] = time.monotonic,
        lanes: Callable[[str], int] = lambda engine: 1,
    ) -> None:
        self.policy = policy
        self.clock = clock
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
        self._lanes_counted_at = clock()
        self._last_refusal: tuple[Any, float, Refusal] | None = None
        self._promised: collections.deque[float] = collections.deque()
        """Retry times promised to refused requests and not passed yet, in order."""
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def add(self, job: Job) -> Job:
        """Admit a job, or raise Busy (429) naming the bound it hit, with a Retry-After computed from the work
        ahead of it."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            self._sweep(now)
            bound = self._refusal(job, now)
            if bound is not None:
                retry_after = bound.retry_after
                if retry_after is None:
                    retry_after = self._promise(bound.holding, job, now)
                state = self.keys.get(job.key)
                self.rejected_total += 1
                self.rejected_by_engine[job.engine] += 1
                self.rejected_by_code[bound.code] += 1
                if state is not None:
                    state.rejected += 1
                else:
                    self.rejected_untracked += 1
                raise Busy(f"server busy: {bound.reason}; retry later", code=bound.code, retry_after=retry_after)
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

    def _refusal(self, job: Job, now: float) -> Bound | None:
        """The bound the job would exceed; None when it is admitted. Jobs behind real time and live jobs waiting
        for text hold no place; live jobs waiting for text have bounds of their own."""
        policy = self.policy
        every = self._jobs()
        jobs = [j for j in every if not j.detached and not j.awaiting_input]
        # A key shared by unrelated clients (the anonymous key) is bounded per client address, so that one
        # address cannot exhaust it for the others.
        shared = job.key in policy.shared_keys and job.client is not None
        of_key = [j for j in jobs if j.key == job.key and (not shared or j.client == job.client)]
        of_client = [j for j in jobs if j.client == job.client] if job.client is not None else []
        of_engine = [j for j in jobs if j.engine == job.engine]
        waiting = [j for j in jobs if j.started_at is None]
        waiting_chars = sum(j.chars for j in waiting)
        if job.awaiting_input:
            idle = [j for j in every if j.awaiting_input and not j.cancelled.is_set()]
            idle_client = [j for j in idle if j.client == job.client] if job.client is not None else []
            if len(idle) >= policy.max_idle_live:
                return Bound(f"{len(idle)} live requests wait for text", code="live_sessions_full", holding=idle)
            if job.client is not None and len(idle_client) >= policy.max_idle_live_per_client:
                reason = f"this client address has {len(idle_client)} live requests waiting for text"
                return Bound(reason, code="live_sessions_full", holding=idle_client)
        if len(of_key) >= policy.max_pending_per_key:
            who = f"key {job.key!r}" + (" from this client address" if shared else "")
            reason = f"{who} has {len(of_key)} requests pending"
            return Bound(reason, code="fairness_key_queue_full", holding=of_key)
        if len(of_engine) >= policy.max_pending_per_engine:
            reason = f"engine {job.engine!r} has {len(of_engine)} requests pending"
            return Bound(reason, code="engine_queue_full", holding=of_engine)
        if len(jobs) >= policy.max_inflight:
            return Bound(f"{len(jobs)} syntheses in flight", code="server_busy", holding=jobs)
        if waiting_chars and waiting_chars + job.chars > policy.max_queued_chars:
            return Bound(f"{waiting_chars} characters waiting", code="server_busy", holding=waiting)
        if job.client is not None and len(of_client) >= policy.max_per_client:
            reason = f"this client address has {len(of_client)} requests pending (at most {policy.max_per_client})"
            return Bound(reason, code="client_queue_full", holding=of_client)
        if job.is_stream and policy.stream_admission and (refusal := self._stream_refusal(job, jobs, now)):
            reason = f"no room for another real-time stream: {refusal.reason}"
            return Bound(reason, code="stream_capacity_full", holding=[], retry_after=refusal.retry_after)
        return None

    def _promise(self, holding: list[Job], job: Job, now: float) -> float:
        """Retry-After for a job refused because `holding` fill its bound: when the first of them should end, then
        one slot per refusal after that, so that clients that obey it come back in about the order they came, a few
        at a time."""
        if any(j.awaiting_input for j in holding):  # they end when their clients say so: a fixed guess
            return self._book(now + self.policy.retry_after, self._work_left_s(job), now, job.engine)
        first = min((self._ends_in(j) for j in holding), default=0.0)
        return self._book(now + first, self._work_left_s(job), now, job.engine)

    def _ends_in(self, job: Job) -> float:
        """Estimated seconds until the job ends: its key's work up to it (a key's jobs run in order), and as much of
        each other busy key's work meanwhile (keys share the thread fairly)."""
        state = self.keys.get(job.key)
        ahead = list(state.jobs)[: list(state.jobs).index(job) + 1] if state and job in state.jobs else [job]
        own = sum(self._work_left_s(j) for j in ahead if not j.cancelled.is_set())
        others = [
            sum(self._work_left_s(j) for j in other.jobs if not j.detached and not j.cancelled.is_set())
            for key, other in self.keys.items()
            if key != job.key
        ]
        return own + sum(min(work, own) for work in others)

    def _book(self, earliest: float, own_s: float, now: float, engine: str) -> float:
        """A retry time from `earliest` on: the first gap among the retries still promised, one slot of `own_s`
        (widened by PROMISE_MARGIN) per promise. Promises whose time has passed no longer count, so a client refused
        again holds no slot twice, and a gap left by clients that came and went is offered again."""
        promised = self._promised
        while promised and promised[0] <= now:
            promised.popleft()
        step = max(own_s * PROMISE_MARGIN, MIN_SLOT_S)
        # Promises due before `earliest` take the first slots; then each promise in the way takes one more.
        taken = bisect.bisect_left(promised, earliest)
        for due in itertools.islice(promised, taken, None):
            if due >= earliest + (taken + 1) * step:  # room for one more before it
                break
            taken += 1
        slot = earliest + taken * step
        if not self._speed(engine).settled:
            # Made before the engine's speed is measured, the estimate can be far out: a client waits at most
            # MAX_RETRY_AFTER_S behind others, and is promised a better-informed time when it comes back.
            slot = min(slot, now + max(MAX_RETRY_AFTER_S, earliest - now))
        bisect.insort(promised, slot)
        if len(promised) > MAX_PROMISES:
            promised.pop()
        return slot - now

    def remove(self, job: Job) -> None:
        with self._lock:
            state = self.keys.get(job.key)
            if state is not None and job in state.jobs:
                state.jobs.remove(job)
                state.last_active = self.clock()
            self._end_step(job)

    def charge(self, job: Job, seconds: float) -> float:
        """The job's step ended after `seconds`: charged to its key. Returns how many steps ran at once on average
        while it ran (itself included)."""
        with self._lock:
            state = self.keys.get(job.key)
            if state is not None:
                state.used += seconds
                state.virtual += seconds / self.policy.weight(job.key)
                state.last_served = state.last_active = job.last_served_at = self.clock()
            overlap = self._end_step(job)
            self._raise_floor()
            return overlap

    def learn(self, job: Job, gpu_s: float, audio_s: float, overlap: float = 1.0) -> None:
        """The job's last step took `gpu_s` and made `audio_s` of audio, with `overlap` steps at once on average
        (`charge`): how its engine's speed is measured."""
        chars = job.unit_chars[job.units_done - 1] if 0 < job.units_done <= len(job.unit_chars) else 0
        if not chars and job.units_total:
            chars = job.chars // job.units_total
        with self._lock:
            self.speeds.setdefault(job.engine, EngineSpeed()).learn(chars, gpu_s, audio_s, overlap)

    def cut_step(self, job: Job) -> bool:
        """Cut the next step of a job just picked short, to about `short_step_s` beside the steps under way, when it
        is a stream ahead of its listener (a newcomer arriving now would wait for it); whether it was."""
        with self._lock:
            chars = self._short_step_chars(job, self.clock())
            return chars is not None and job.cut_next_step(chars)

    def _short_step_chars(self, job: Job, now: float) -> int | None:
        policy = self.policy
        if policy.short_step_s <= 0 or not job.is_stream or job.detached or not job.units_done or job.shorten is None:
            return None
        in_hand = job.playback.in_hand(now)
        # Running low (less than a short step in hand) it runs dry whatever it takes: its whole chunk is the most audio
        if in_hand is None or in_hand < policy.short_step_s:
            return None
        # GPU seconds alone that last about `short_step_s` beside the steps under way (a newcomer waits for them all);
        # a step that starts beside others has company from the start, if not yet on a lane
        pool = self._pool(job.engine)
        at_once = max(len(self.running), 2) if self.running[job].beside else 1
        alone_s = policy.short_step_s / pool.slowdown[min(at_once, pool.lanes) - 1]
        if self._next_step_s(job) <= alone_s:
            return None
        return max(1, int(alone_s / self._speed(job.engine).gpu_s_per_char))

    def record_stall(self, job: Job, seconds: float) -> None:
        with self._lock:
            self.underrun_s[job.engine] = self.underrun_s.get(job.engine, 0.0) + seconds
            self.underruns[job.engine] += 1

    def pick(self, resident: Collection[str]) -> Job | None:
        """The job that steps next (see the module's docstring), among jobs that can step now: beside the steps
        under way, when their engine runs several at once."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            self._sweep(now)
            for job in self._jobs():
                if job in self.running:
                    continue
                if job.deadline is not None and now >= job.deadline:
                    job.cancel("request timed out")
                if job.cancelled.is_set():  # dropping one costs no GPU time: do it first, wherever it waits
                    return self._begin(job, now, beside=False)
            candidates = [j for state in self.keys.values() for j in state.jobs if j.is_stream or j.detached]
            candidates += [head for state in self.keys.values() if (head := self._whole_file_head(state))]
            ready = [j for j in candidates if j not in self.running and self._can_step(j)]
            if self.running:
                ready = self._alongside(ready, now)
            if not ready:
                return None
            on_resident = [j for j in ready if j.engine in resident]
            elsewhere = [j for j in ready if j.engine not in resident]
            if on_resident and elsewhere:
                # Waiting counts from a job's last step (or its admission): right after a switch, the engine left
                # behind has to wait the whole bound again, so engines do not swap on every step.
                oldest = min(j.last_served_at or j.enqueued_at for j in elsewhere)
                ready = elsewhere if now - oldest >= self.policy.engine_switch_max_wait_s else on_resident
            self._raise_floor()
            chosen = self._choose(ready, now)
            beside = not self._first_step(chosen) and (bool(self.running) or self._goes_with_another(chosen, ready))
            return self._begin(chosen, now, beside)

    def runs_beside(self, job: Job) -> bool:
        """Whether the job's step under way runs beside others (on a share of the engine's threads)."""
        with self._lock:
            step = self.running.get(job)
            return step is not None and step.beside

    def _goes_with_another(self, job: Job, ready: list[Job]) -> bool:
        """Whether a step starting alone has company coming: another job of its engine ready to start beside it.
        Then both run beside each other from the start, each on its share of the threads (two inferences of one
        thread each make more audio per second than one of two threads after the other; a two-thread inference
        beside a one-thread one makes less than either)."""
        if self.lanes(job.engine) < 2 or self._first_step(job):
            return False
        return any(j is not job and j.engine == job.engine and not self._first_step(j) for j in ready)

    def _alongside(self, ready: list[Job], now: float) -> list[Job]:
        """Of the jobs ready, those that may start while the steps under way run: their engine's, while it has a lane
        free. A newcomer's first step takes the first lane free, with all the engine's threads (the steps under way
        end soon: they are short), and nothing else starts while one waits. Beside a step alone (a first step, or one
        that had no company when it began) only streams that would run dry before it ends start. Once another
        engine's request has waited `engine_switch_max_wait_s`, nothing starts: the lanes drain for the switch."""
        engine = next(iter(self.running)).engine
        if len(self.running) >= self.lanes(engine):
            return []
        others = [j for j in ready if j.engine != engine]
        if (
            others
            and now - min(j.last_served_at or j.enqueued_at for j in others) >= self.policy.engine_switch_max_wait_s
        ):
            return []
        same = [j for j in ready if j.engine == engine]
        first_steps = [j for j in same if self._first_step(j)]
        if first_steps:  # it starts on the free lane at once, and nothing else does
            return first_steps
        alone = [(j, step.since) for j, step in self.running.items() if not step.beside]
        if alone:
            left = max(self._next_step_s(j) - (now - since) for j, since in alone)
            same = [j for j in same if j.is_stream and not j.detached and self._slack(j, now) < left]
        return same

    @staticmethod
    def _first_step(job: Job) -> bool:
        return job.is_stream and not job.detached and job.units_done == 0

    def _can_step(self, job: Job) -> bool:
        """Room in its buffer (a detached job steps only when its writer asks for audio and none waits), and a step
        to take (a live job waiting for text has none)."""
        if job.awaiting_input:
            job.input_waited_at = self.clock()
            return False
        if job.detached:
            return job.buffered == 0 and job.playback.asking_since is not None
        return job.buffered < self.policy.max_buffered_pieces

    def _choose(self, ready: list[Job], now: float) -> Job:
        newcomers = [j for j in ready if j.is_stream and not j.detached and j.units_done == 0]
        if newcomers:
            return min(newcomers, key=lambda j: (j.enqueued_at, j.id))
        streams = [(self._slack(j, now), j.id, j) for j in ready if j.is_stream and not j.detached]
        whole = [j for j in ready if not j.is_stream and not j.detached]
        # Room for the longest whole-file step that could go first, and for newcomers' first steps after it.
        guard = self.policy.stream_max_start_wait_s + max((self._next_step_s(j) for j in whole), default=0.0)
        # A stream whose reader is behind real time is not short of audio because of us: never urgent.
        urgent = [e for e in streams if e[0] < guard and not e[2].playback.reader_lag(now)]
        if urgent:
            return min(urgent, key=lambda e: (e[0], e[1]))[2]
        if whole:
            return min(whole, key=lambda j: (self.keys[j.key].virtual, self.keys[j.key].last_served))
        if streams:
            return min(streams, key=lambda e: (e[0], e[1]))[2]
        return min(ready, key=lambda j: (j.last_served_at or j.enqueued_at, j.id))

    def _begin(self, job: Job, now: float, beside: bool) -> Job:
        self._count_lanes(now)
        self.running[job] = StepUnderWay(now, self._lane_seconds, beside)
        return job

    def _end_step(self, job: Job) -> float:
        """The job's step is over: how many steps ran at once on average while it ran (itself included)."""
        if job not in self.running:
            return 1.0
        now = self.clock()
        self._count_lanes(now)
        step = self.running.pop(job)
        if now <= step.since:
            return float(len(self.running) + 1)
        return max(1.0, (self._lane_seconds - step.lane_seconds) / (now - step.since))

    def _count_lanes(self, now: float) -> None:
        self._lane_seconds += len(self.running) * max(0.0, now - self._lanes_counted_at)
        self._lanes_counted_at = now

    @staticmethod
    def _whole_file_head(state: KeyState) -> Job | None:
        return next((j for j in state.jobs if not j.is_stream and not j.detached), None)

    def _jobs(self) -> list[Job]:
        return [j for state in self.keys.values() for j in state.jobs]

    def jobs(self) -> list[Job]:
        """Every admitted job, now."""
        with self._lock:
            return self._jobs()

    def _speed(self, engine: str) -> EngineSpeed:
        speed = self.speeds.get(engine)
        return speed if speed is not None else EngineSpeed()

    def _pool(self, engine: str) -> Pool:
        """The engine's lanes as admission plans them: their measured slowdown under overlap (none gained until
        measured), and the short steps of streams ahead of their listeners."""
        policy = self.policy
        return Pool(self._speed(engine).slowdown(max(1, self.lanes(engine))), short_lead=policy.short_step_s)

    def _work_left_s(self, job: Job) -> float:
        """Estimated GPU seconds of the job's steps not yet finished."""
        return sum(job.chars_left()) * self._speed(job.engine).gpu_s_per_char

    def _next_step_s(self, job: Job) -> float:
        """Estimated GPU seconds of the job's next step."""
        left = job.chars_left()
        return left[0] * self._speed(job.engine).gpu_s_per_char if left else 0.0

    def _slack(self, job: Job, now: float) -> float:
        """How long the stream can wait before its next step would start too late for its listener."""
        return (job.playback.in_hand(now) or 0.0) - self._next_step_s(job)

    def _stream_refusal(self, job: Job, admitted: list[Job], now: float) -> Refusal | None:
        streams = [
            j
            for j in admitted
            if j.is_stream and not j.cancelled.is_set() and j.chars_left() and not j.playback.reader_lag(now)
        ]
        candidate = self._demand(job, now)
        # A burst of identical requests meets the same streams: the first one's answer stands for a second.
        signature = (job.engine, tuple(job.chars_left()), tuple((j.id, j.units_done) for j in streams))
        memo = self._last_refusal
        if memo is not None and memo[0] == signature and now - memo[1] < 1.0:
            refusal: Refusal | None = Refusal(memo[2].reason, max(0.0, memo[2].retry_after - (now - memo[1])))
        else:
            pool = self._pool(job.engine)
            slowdown = pool.slowdown[min(len(self.running), pool.lanes) - 1] if self.running else 1.0
            under_way = [
                (
                    max(0.0, self._next_step_s(current) * slowdown / self.policy.stream_gpu_share - (now - since)),
                    current.id if current in streams else None,
                )
                for current, since in ((j, step.since) for j, step in self.running.items())
                if not current.cancelled.is_set()
            ]
            refusal = admission(
                [self._demand(j, now) for j in streams],
                candidate,
                under_way=under_way,
                pool=pool,
                max_start_wait=self.policy.stream_max_start_wait_s,
            )
            self._last_refusal = (signature, now, refusal) if refusal is not None else None
        if refusal is None:
            return None
        # Refused clients are promised successive slots, one such stream's GPU time apart, not all the same instant.
        return Refusal(
            refusal.reason,
            self._book(now + refusal.retry_after, sum(gpu for gpu, _ in candidate.units), now, job.engine),
        )

    def _demand(self, job: Job, now: float) -> StreamDemand:
        speed = self._speed(job.engine)
        share = self.policy.stream_gpu_share
        left = job.chars_left()
        units = [(c * speed.gpu_s_per_char / share, c * speed.audio_s_per_char) for c in left]
        in_hand = job.playback.in_hand(now)
        if in_hand is None and job.units_done:  # started, but no audio yet: a listener with nothing in hand
            in_hand = 0.0
        # The candidate (not admitted yet: no id) arrives after every admitted stream.
        return StreamDemand(
            job.id or -1, units, in_hand, job.enqueued_at if job.id else math.inf, self._splits(job, left)
        )

    def _splits(self, job: Job, left: list[int]) -> list[tuple[float, ...]]:
        """For each step left of a stream, the shares of it its short steps would take (solo-sized); none for the
        step under way, or where the text cannot be cut."""
        if self.policy.short_step_s <= 0 or job.cuts is None:
            return []
        max_chars = max(1, int(self.policy.short_step_s / self._speed(job.engine).gpu_s_per_char))
        planned = job.cuts(max_chars)
        if len(planned) > len(left):
            return []
        shares = [tuple(chars / sum(steps) for chars in steps) for steps in planned]
        return [()] * (len(left) - len(planned)) + shares

    def _sweep(self, now: float) -> None:
        """Readers behind real time stop holding a slot; readers that take nothing for too long are dropped."""
        policy = self.policy
        for job in self._jobs():
            if job.cancelled.is_set():
                continue
            idle = job.playback.idle_for(now)
            if idle >= policy.reader_idle_limit_s:
                log.warning(
                    "job %d (key %s, client %s) dropped: its reader took no audio for %.0f s (limit %.0f s)",
                    job.id,
                    job.key,
                    job.client,
                    idle,
                    policy.reader_idle_limit_s,
                )
                job.drop_stalled(f"its reader took no audio for {idle:.0f} s")
            elif job.streaming and not job.detached and job.playback.reader_lag(now) >= policy.slow_reader_lag_s:
                job.detached = True
                log.info(
                    "job %d (key %s, client %s) detached: its reader is %.0f s behind real time; it holds no slot now",
                    job.id,
                    job.key,
                    job.client,
                    job.playback.reader_lag(now),
                )

    def _raise_floor(self) -> None:
        busy = [s.virtual for s in self.keys.values() if s.jobs]
        if busy:
            self.floor = max(self.floor, min(busy))

    def _expire(self, now: float) -> None:
        ttl = self.policy.idle_state_ttl_s
        for key in [k for k, s in self.keys.items() if not s.jobs and now - s.last_active >= ttl]:
            del self.keys[key]
        idle = [(s.last_active, k) for k, s in self.keys.items() if not s.jobs]
        if len(idle) > self.policy.max_tracked_keys:
            for _, key in sorted(idle)[: len(idle) - self.policy.max_tracked_keys]:
                del self.keys[key]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            now = self.clock()
            self._expire(now)
            self._sweep(now)
            jobs = [j for j in self._jobs() if not j.detached and not j.awaiting_input]
            engines = sorted({j.engine for j in jobs} | set(self.rejected_by_engine))
            streams = [j for j in jobs if j.is_stream and j.chars_left()]
            return {
                "running": sum(j.started_at is not None for j in jobs),
                "waiting": sum(j.started_at is None for j in jobs),
                "detached": sum(j.detached for j in self._jobs()),
                "awaiting_text": sum(j.awaiting_input and not j.detached for j in self._jobs()),
                "queued_chars": sum(j.chars for j in jobs if j.started_at is None),
                "rejected": self.rejected_total,
                "rejected_by_code": dict(self.rejected_by_code),
                "engines": {
                    engine: {
                        "running": sum(j.engine == engine and j.started_at is not None for j in jobs),
                        "waiting": sum(j.engine == engine and j.started_at is None for j in jobs),
                        "rejected": self.rejected_by_engine[engine],
                    }
                    for engine in engines
                },
                "streams": {
                    "admitted": len(streams),
                    "promised_audio_s": round(
                        sum(sum(j.chars_left()) * self._speed(j.engine).audio_s_per_char for j in streams), 3
                    ),
                    "underrun_s": {
                        e: round(self.underrun_s.get(e, 0), 6) for e in sorted({*self.speeds, *self.underrun_s})
                    },
                    "underruns": {e: self.underruns[e] for e in sorted({*self.speeds, *self.underruns})},
                    "speed": {
                        engine: {
                            "gpu_s_per_audio_s": round(speed.real_time_factor, 4),
                            "audio_s_per_char": round(speed.audio_s_per_char, 5),
                            "steps_at_once": (pool := self._pool(engine)).lanes,
                            "slowdown": [round(factor, 3) for factor in pool.slowdown],
                            "capacity": round(pool.capacity, 3),
                        }
                        for engine, speed in self.speeds.items()
                        if speed.known
                    },
                },
                "keys": self._key_rows(),
            }

    def _key_rows(self) -> dict[str, dict[str, Any]]:
        """Per key rows, at most `max_key_labels` of them (busiest, then most used); the rest summed."""

        def row(state: KeyState, weight: float | None) -> dict[str, Any]:
            held = [j for j in state.jobs if not j.detached and not j.awaiting_input]
            return {
                "running": sum(j.started_at is not None for j in held),
                "waiting": sum(j.started_at is None for j in held),
                "weight": weight,
                "used_gpu_s": round(state.used, 6),
                "rejected": state.rejected,
            }

        ranked = sorted(self.keys.items(), key=lambda kv: (-len(kv[1].jobs), -kv[1].used, kv[0]))
        cap = self.policy.max_key_labels
        rows = {key: row(state, self.policy.weight(key)) for key, state in ranked[:cap]}
        rest = [row(state, None) for _, state in ranked[cap:]]
        if rest or self.rejected_untracked:
            rows[OTHER_KEYS] = {
                "running": sum(r["running"] for r in rest),
                "waiting": sum(r["waiting"] for r in rest),
                "weight": None,
                "used_gpu_s": round(sum(r["used_gpu_s"] for r in rest), 6),
                "rejected": sum(r["rejected"] for r in rest) + self.rejected_untracked,
            }
        return rows
