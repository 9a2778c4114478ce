"""Admission to the fair queue: the bounds a job must fit, and the Retry-After promised to each job refused.

Admission refuses with 429 what would exceed a bound: per key (per client address within a key that unrelated
clients share), per engine, in flight, characters waiting, per client address, and for streams the real-time capacity
(`playback.admission`: the engine's measured speed and the audio promised to admitted streams). A live request
waiting for text holds none of those places: live requests waiting for text have bounds of their own, in all and per
client address. A response whose reader falls behind real time stops holding a slot (`gpu.slow_readers`). A
rejection creates no key state; its Retry-After is when the work ahead should have made room, one slot per place in
the line of refused clients (`gpu.retry_line`) ahead of it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from errors import Busy
from gpu.jobs import Job
from gpu.playback import Refusal, StreamDemand, admission
from gpu.queue_state import QueueState
from gpu.retry_line import RetryLine

MIN_SLOT_S = 0.25
"""The least time between the places of two refused requests."""
PROMISE_MARGIN = 1.5
"""Places in line are this much further apart than the estimate of each request's GPU time: one back too early is
refused again, while one back a little late costs nothing as long as the other admitted requests keep the thread
busy (short texts cost more than their characters say)."""


@dataclass(frozen=True)
class Bound:
    """A bound a job would exceed: why, its error code, and the admitted jobs that fill it (whose ends make room)."""

    reason: str
    code: str
    holding: list[Job]
    retry_after: float | None = None
    """When to retry, where the bound computed it already (stream capacity)."""


class Admission:
    """Whether a job fits the queue's bounds, and when each refused job should come back."""

    def __init__(self, state: QueueState, shared_keys: frozenset[str]) -> None:
        self.state = state
        self.shared_keys = shared_keys
        """Keys that unrelated clients share (the anonymous key of a node without API keys): `max_pending_per_key`
        counts per client address within them."""
        self._last_refusal: tuple[Any, float, Refusal] | None = None
        self.line = RetryLine(state.settings)

    def check(self, job: Job, now: float) -> None:
        """Raise Busy (429) naming the bound the job would exceed, with a Retry-After computed from the work ahead
        of it, and count the refusal; return when it is admitted."""
        bound = self._refusal(job, now)
        if bound is None:
            if not job.background:
                self.line.admitted((job.key, job.client), now)
            return
        retry_after = bound.retry_after
        if retry_after is None:
            retry_after = self._promise(bound.holding, job, now)
        self.state.count_rejection(job, bound.code)
        raise Busy(f"server busy: {bound.reason}; retry later", code=bound.code, retry_after=retry_after)

    def _refusal(self, job: Job, now: float) -> Bound | None:
        """The bound the job would exceed; None when it is admitted. Jobs behind real time and live jobs waiting
        for text hold no place; live jobs waiting for text have bounds of their own."""
        settings = self.state.settings
        if job.background:  # jobs/ bounds its own work, and it never takes an interactive request's place
            return None
        every = [j for j in self.state.admitted() if not j.background]
        jobs = [j for j in every if not j.detached and not j.awaiting_input]
        # A key shared by unrelated clients (the anonymous key) is bounded per client address, so that one
        # address cannot exhaust it for the others.
        shared = job.key in self.shared_keys and job.client is not None
        of_key = [j for j in jobs if j.key == job.key and (not shared or j.client == job.client)]
        of_client = [j for j in jobs if j.client == job.client] if job.client is not None else []
        of_engine = [j for j in jobs if j.engine == job.engine]
        waiting = [j for j in jobs if j.started_at is None]
        waiting_chars = sum(j.chars for j in waiting)
        if job.awaiting_input:
            idle = [j for j in every if j.awaiting_input and not j.cancelled.is_set()]
            idle_client = [j for j in idle if j.client == job.client] if job.client is not None else []
            if len(idle) >= settings.max_idle_live:
                return Bound(f"{len(idle)} live requests wait for text", code="live_sessions_full", holding=idle)
            if job.client is not None and len(idle_client) >= settings.max_idle_live_per_client:
                reason = f"this client address has {len(idle_client)} live requests waiting for text"
                return Bound(reason, code="live_sessions_full", holding=idle_client)
        if len(of_key) >= settings.max_pending_per_key:
            who = f"key {job.key!r}" + (" from this client address" if shared else "")
            reason = f"{who} has {len(of_key)} requests pending"
            return Bound(reason, code="fairness_key_queue_full", holding=of_key)
        if len(of_engine) >= settings.max_pending_per_engine:
            reason = f"engine {job.engine!r} has {len(of_engine)} requests pending"
            return Bound(reason, code="engine_queue_full", holding=of_engine)
        if len(jobs) >= settings.max_inflight:
            return Bound(f"{len(jobs)} syntheses in flight", code="server_busy", holding=jobs)
        if waiting_chars and waiting_chars + job.chars > settings.max_queued_chars:
            return Bound(f"{waiting_chars} characters waiting", code="server_busy", holding=waiting)
        if job.client is not None and len(of_client) >= settings.max_per_client:
            reason = f"this client address has {len(of_client)} requests pending (at most {settings.max_per_client})"
            return Bound(reason, code="client_queue_full", holding=of_client)
        if job.is_stream and settings.stream_admission and (refusal := self._stream_refusal(job, jobs, now)):
            reason = f"no room for another real-time stream: {refusal.reason}"
            return Bound(reason, code="stream_capacity_full", holding=[], retry_after=refusal.retry_after)
        return None

    def _promise(self, holding: list[Job], job: Job, now: float) -> float:
        """Retry-After for a job refused because `holding` fill its bound: when the first of them should end, then
        one slot per place in line ahead of its client's, so that clients that obey it come back in about the order
        they came, a few at a time."""
        own_s = self.state.work_left_s(job)
        if any(j.awaiting_input for j in holding):  # they end when their clients say so: a fixed guess
            return self._book(job, now + self.state.settings.retry_after_seconds, own_s, now)
        first = min((self._ends_in(j) for j in holding), default=0.0)
        return self._book(job, now + first, own_s, now)

    def _ends_in(self, job: Job) -> float:
        """Estimated seconds until the job ends: its key's work up to it (a key's jobs run in order), and as much of
        each other busy key's work meanwhile (keys share the thread fairly)."""
        keys, work_left_s = self.state.keys, self.state.work_left_s
        state = keys.get(job.key)
        ahead = list(state.jobs)[: list(state.jobs).index(job) + 1] if state and job in state.jobs else [job]
        own = sum(work_left_s(j) for j in ahead if not j.cancelled.is_set())
        others = [
            sum(work_left_s(j) for j in other.jobs if not j.detached and not j.background and not j.cancelled.is_set())
            for key, other in keys.items()
            if key != job.key
        ]
        return own + sum(min(work, own) for work in others)

    def _book(self, job: Job, earliest: float, own_s: float, now: float) -> float:
        """The job's client's place in line, from `earliest` on, one slot of `own_s` (widened by PROMISE_MARGIN) per
        place ahead of it: the Retry-After it is told."""
        step = max(own_s * PROMISE_MARGIN, MIN_SLOT_S)
        return self.line.refused((job.key, job.client), earliest, step, now)

    def _stream_refusal(self, job: Job, admitted: list[Job], now: float) -> Refusal | None:
        state, settings = self.state, self.state.settings
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
            pool = state.pool(job.engine)
            slowdown = pool.slowdown[min(len(state.running), pool.lanes) - 1] if state.running else 1.0
            under_way = [
                (
                    max(0.0, state.next_step_s(current) * slowdown / settings.stream_gpu_share - (now - since)),
                    current.id if current in streams else None,
                )
                for current, since in ((j, step.since) for j, step in state.running.items())
                if not current.cancelled.is_set()
            ]
            refusal = admission(
                [self._demand(j, now) for j in streams],
                candidate,
                under_way=under_way,
                pool=pool,
                max_start_wait=settings.stream_max_start_wait_s,
            )
            self._last_refusal = (signature, now, refusal) if refusal is not None else None
        if refusal is None:
            return None
        # Refused clients hold successive places in line, one such stream's GPU time apart, not all the same instant.
        return Refusal(
            refusal.reason,
            self._book(job, now + refusal.retry_after, sum(gpu for gpu, _ in candidate.units), now),
        )

    def _demand(self, job: Job, now: float) -> StreamDemand:
        speed = self.state.speed(job.engine)
        share = self.state.settings.stream_gpu_share
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
        short_step_s = self.state.settings.short_step_s
        if short_step_s <= 0 or job.cuts is None:
            return []
        max_chars = max(1, int(short_step_s / self.state.speed(job.engine).gpu_s_per_char))
        planned = job.cuts(max_chars)
        if len(planned) > len(left):
            return []
        shares = [tuple(chars / sum(steps) for chars in steps) for steps in planned]
        return [()] * (len(left) - len(planned)) + shares
