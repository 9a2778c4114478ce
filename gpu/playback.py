"""Real-time streams: what a listener has in hand, how fast each engine makes audio, and whether the GPU thread can
keep one more stream ahead of its listener.

A streamed response has a playback clock: a listener who starts playing at the first byte, plays in real time and
pauses when it runs dry. `Playback` follows that clock from what the response writer takes from the job and from
when it asks for more (it asks once it has sent the last piece). A stall is an underrun only when the writer was
asking and the audio came late from the GPU thread; a writer still busy sending when a real-time listener would long
have run out has a reader *behind real time*.

`EngineSpeed` learns an engine's GPU seconds and audio seconds per character of text from the steps it runs, and, for
an engine that runs several steps at once (ONNX Runtime on a CPU node), how much slower a step runs beside others.

`simulate` plays the GPU thread's next minute for a set of streams the way the scheduler serves them (first steps of
streams not yet started first, in order of arrival, then the stream that runs dry soonest), on as many lanes as the
engine runs steps at once (`Pool`), so admission can see whether one more stream would make an admitted stream run
dry (`admission`).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

UNDERRUN_TOLERANCE_S = 0.05
"""Predicted stalls shorter than this are noise of the estimate, not an underrun."""
HORIZON_S = 60.0
"""How far ahead admission simulates; beyond it, the streams' steady demand decides."""
MAX_SIMULATED_STEPS = 2000


@dataclass
class Playback:
    """The playback clock of one response, fed with the audio seconds of each piece as it is produced and taken, and
    with when the response writer asks for the next piece (it asks once it has sent the last)."""

    delivered_s: float = 0.0
    """Audio handed to the response by the GPU thread."""
    sent_s: float = 0.0
    """Audio the response writer has taken (and sent to the client)."""
    ends_at: float | None = None
    """When a real-time listener runs out of what was sent; None before the first piece."""
    last_sent_at: float | None = None
    asking_since: float | None = None
    """When the writer started waiting for the next piece; None while it is busy sending the last one."""
    underrun_s: float = 0.0
    """Time a real-time listener spent waiting on the GPU thread after its first audio."""
    underruns: int = 0
    """How many times it ran dry."""

    @property
    def waiting_s(self) -> float:
        """Audio produced that the writer has not taken yet."""
        return self.delivered_s - self.sent_s

    def delivered(self, seconds: float) -> None:
        self.delivered_s += seconds

    def ask(self, now: float) -> None:
        """The writer waits for the next piece."""
        if self.asking_since is None:
            self.asking_since = now

    def sent(self, seconds: float, produced_at: float, now: float, input_waited_at: float | None = None) -> float:
        """The writer took a piece of `seconds` produced at `produced_at`; returns the stall it ends (0 if none).
        Only waiting that the writer itself did counts: a listener who ran out while its reader was still busy
        sending is the reader's doing, and one who ran out while the job waited for its client's text
        (`input_waited_at`, a live request's) starts again, as a new listener would."""
        asked = self.asking_since if self.asking_since is not None else now
        self.asking_since = None
        if seconds <= 0:  # no audio (word timings, the end, any piece of a whole-file job): nothing was waited for
            self.last_sent_at = now
            return 0.0
        stall = 0.0
        if self.ends_at is None or (input_waited_at is not None and input_waited_at >= self.ends_at):
            self.ends_at = now + seconds
        else:
            stall = max(0.0, produced_at - max(self.ends_at, asked))
            if stall > 0:
                self.underrun_s += stall
                self.underruns += 1
            self.ends_at = max(self.ends_at, now) + seconds
        self.sent_s += seconds
        self.last_sent_at = now
        return stall

    def in_hand(self, now: float) -> float | None:
        """Audio seconds a real-time listener has left, counting audio still waiting for the writer; negative when
        it has been dry that long; None before any audio."""
        if self.ends_at is None:
            return self.waiting_s if self.delivered_s > 0 else None
        if self.waiting_s > 0:  # whatever the listener lacks, audio is there: the reader is slow, not us
            return max(self.ends_at - now, 0.0) + self.waiting_s
        return self.ends_at - now

    def reader_lag(self, now: float) -> float:
        """How far the reader is behind real time: how long ago a real-time listener would have finished what was
        sent, while the writer is still busy sending it. 0 while the writer asks for more."""
        if self.ends_at is None or self.asking_since is not None:
            return 0.0
        return max(0.0, now - self.ends_at)

    def idle_for(self, now: float) -> float:
        """How long the writer has been busy sending one piece (its reader took nothing meanwhile)."""
        if self.last_sent_at is None or self.asking_since is not None:
            return 0.0
        return now - self.last_sent_at


PRIOR_AUDIO_S_PER_CHAR = 0.07
"""Speech runs at about 14 characters a second: what an engine is assumed to make before any step is measured."""
PRIOR_GPU_S_PER_AUDIO_S = 1.0
"""Assumed before any step is measured: no faster than real time, so a cold engine takes one long stream at a time."""


MIN_OVERLAP_STEPS = 3
"""Steps measured beside others before their slowdown counts: until then k steps at once are assumed to take k
times as long each (nothing gained by running them together)."""


@dataclass
class EngineSpeed:
    """GPU seconds and audio seconds per character of one engine, the median of its last steps (a step that also
    loaded the model or prepared a voice does not skew it); a pessimistic prior until the first step. Steps that ran
    beside others are kept apart, by how many ran at once: they measure the engine's speed under overlap."""

    window: int = 16
    _gpu: collections.deque[float] = field(default_factory=collections.deque)
    _audio: collections.deque[float] = field(default_factory=collections.deque)
    _overlapped: dict[int, collections.deque[float]] = field(default_factory=dict)
    """GPU seconds per character of steps that ran with k steps at once on average (k >= 2)."""

    def learn(self, chars: int, gpu_s: float, audio_s: float, overlap: float = 1.0) -> None:
        """One step of `chars` characters took `gpu_s` and made `audio_s` of audio, with `overlap` steps running at
        once on average while it ran (itself included)."""
        if chars <= 0 or gpu_s <= 0 or audio_s <= 0:
            return
        at_once = max(1, round(overlap))
        gpu = self._gpu if at_once == 1 else self._overlapped.setdefault(at_once, collections.deque())
        for samples, value in ((gpu, gpu_s / chars), (self._audio, audio_s / chars)):
            samples.append(value)
            if len(samples) > self.window:
                samples.popleft()

    def slowdown(self, lanes: int) -> tuple[float, ...]:
        """For k = 1 .. `lanes` steps at once, how much longer each takes than alone: measured (the median), else k
        (nothing gained). A slowdown below 1 is noise: 1."""
        factors = [1.0]
        for at_once in range(2, lanes + 1):
            samples = self._overlapped.get(at_once, ())
            if self._gpu and len(samples) >= MIN_OVERLAP_STEPS:
                factors.append(max(1.0, statistics.median(samples) / self.gpu_s_per_char))
            else:
                factors.append(float(at_once))
        return tuple(factors)

    @property
    def known(self) -> bool:
        return bool(self._gpu)

    @property
    def settled(self) -> bool:
        """Measured on a whole window of steps: no longer swayed by the first (often slow) ones."""
        return len(self._gpu) >= self.window

    @property
    def gpu_s_per_char(self) -> float:
        return statistics.median(self._gpu) if self._gpu else PRIOR_AUDIO_S_PER_CHAR * PRIOR_GPU_S_PER_AUDIO_S

    @property
    def audio_s_per_char(self) -> float:
        return statistics.median(self._audio) if self._audio else PRIOR_AUDIO_S_PER_CHAR

    @property
    def real_time_factor(self) -> float:
        """GPU seconds per audio second."""
        return self.gpu_s_per_char / self.audio_s_per_char


@dataclass(frozen=True)
class Pool:
    """The lanes of the GPU thread: how many steps its engine runs at once, and how much longer each takes then."""

    slowdown: tuple[float, ...] = (1.0,)
    """slowdown[k - 1]: a step's time when k steps run at once, over its time alone."""
    short_lead: float = 0.0
    """A started stream holding at least this much audio takes the first of its step's short steps (its `splits`),
    the rest later (`FairQueue.cut_step`); 0: whole steps always."""

    @property
    def lanes(self) -> int:
        return len(self.slowdown)

    @property
    def capacity(self) -> float:
        """Work done per second at best, in seconds of steps run alone: 1 for a single lane."""
        return max(at_once / factor for at_once, factor in enumerate(self.slowdown, 1))


ONE_LANE = Pool()


@dataclass
class StreamDemand:
    """One stream as admission sees it: its steps left and what its listener has in hand."""

    id: int
    units: list[tuple[float, float]]
    """(GPU seconds, audio seconds) of each step left, in order."""
    in_hand: float | None
    """Seconds the listener has left (see Playback.in_hand); None when the stream has not started."""
    arrival: float = 0.0
    """Streams not yet started take their first step in this order (ties: by id)."""
    splits: list[tuple[float, ...]] = field(default_factory=list)
    """For each step left, the shares of it its short steps would take (`FairQueue.cut_step`), in order; empty (or a
    single share, or none given): it cannot be cut short."""

    @property
    def real_time_factor(self) -> float:
        gpu, audio = sum(u[0] for u in self.units), sum(u[1] for u in self.units)
        return gpu / audio if audio > 0 else 0.0


@dataclass
class Simulation:
    at: float
    """Where the simulation stopped (seconds from now): the horizon, or when every stream had made all its audio."""
    underrun: dict[int, float]
    """Predicted stall of each stream until then."""
    start_wait: dict[int, float]
    """For streams not yet started: seconds from now until their first step begins."""
    finish: dict[int, float]
    """Seconds from now until each stream's last step ends (estimated from its demand beyond the horizon)."""
    demand_after: float
    """GPU seconds per second of playback that the streams still generating at the end need."""
    state: list[StreamDemand]
    """The streams still generating at the end, as seen from then."""


def simulate(
    streams: list[StreamDemand],
    under_way: Sequence[tuple[float, int | None]] = (),
    until: float = HORIZON_S,
    pool: Pool = ONE_LANE,
) -> Simulation:
    """Serve `streams` the way the scheduler does, from now (0) until `until`, on `pool`'s lanes. `under_way`: the
    steps running now, each as (seconds left, the stream whose first unit it is, or None for other work); a free
    lane takes the most urgent stream not being served, a step that starts beside others takes as much longer as
    the pool says (but a first step, with all the threads, takes its time alone), and nothing starts beside a first
    step once it has."""
    left = {s.id: collections.deque(s.units) for s in streams}
    splits = {s.id: collections.deque(s.splits or [()] * len(s.units)) for s in streams}
    ends = {s.id: s.in_hand for s in streams}
    arrival = {s.id: s.arrival for s in streams}
    underrun = {s.id: 0.0 for s in streams}
    finish = {s.id: 0.0 for s in streams}
    start_wait: dict[int, float] = {}

    def produce(sid: int, at: float) -> None:
        audio = left[sid].popleft()[1]
        splits[sid].popleft()
        end = ends[sid]
        if end is None:
            ends[sid] = at + audio
        else:
            if at > end:
                underrun[sid] += at - end
            ends[sid] = max(end, at) + audio
        if not left[sid]:
            finish[sid] = at

    def urgency(sid: int) -> tuple[int, float, int]:
        end = ends[sid]
        return (0, arrival[sid], sid) if end is None else (1, end, sid)

    order = itertools.count()
    ending: list[tuple[float, int, int | None]] = []  # the steps under way: when each ends, and whose it is
    alone: int | None = None  # the stream whose first step runs: nothing starts beside it
    for seconds, sid in under_way[: pool.lanes]:
        served = sid if sid is not None and left.get(sid) else None
        if served is not None and ends[served] is None:
            start_wait[served] = 0.0
            alone = served
        heapq.heappush(ending, (seconds, next(order), served))
    serving = {sid for _, _, sid in ending if sid is not None}
    queue = [urgency(sid) for sid, units in left.items() if units and sid not in serving]
    heapq.heapify(queue)
    now, steps = 0.0, 0
    while now < until and steps < MAX_SIMULATED_STEPS:
        while queue and len(ending) < pool.lanes and alone is None:
            _, _, sid = heapq.heappop(queue)
            end = ends[sid]
            if end is None:
                start_wait[sid] = now
                alone = sid
            gpu, audio = left[sid][0]
            shares = splits[sid][0]
            if pool.short_lead and end is not None and end - now >= pool.short_lead and len(shares) > 1:
                head = shares[0]  # cut short, as the scheduler would: a newcomer would wait for it
                left[sid][0] = (gpu * (1 - head), audio * (1 - head))
                splits[sid][0] = tuple(share / (1 - head) for share in shares[1:])
                left[sid].appendleft((gpu * head, audio * head))
                splits[sid].appendleft(())
                gpu *= head
            # A first step takes all the engine's threads, beside what is left of the steps under way.
            slowdown = 1.0 if alone == sid else pool.slowdown[len(ending)]
            heapq.heappush(ending, (now + gpu * slowdown, next(order), sid))
            steps += 1
        if not ending:
            break
        now, _, sid = heapq.heappop(ending)
        if sid is not None and sid == alone:
            alone = None
        if sid is not None:
            produce(sid, now)
            if left[sid]:
                heapq.heappush(queue, urgency(sid))
    state = [
        StreamDemand(
            sid, list(units), None if (end := ends[sid]) is None else end - now, arrival[sid], list(splits[sid])
        )
        for sid, units in left.items()
        if units
    ]
    demand = sum(s.real_time_factor for s in state)
    # Beyond the end each stream gets its share of the pool: done after demand / capacity x its audio.
    for stream in state:
        finish[stream.id] = now + max(demand / pool.capacity, 1.0) * sum(audio for _, audio in stream.units)
    return Simulation(now, underrun, start_wait, finish, demand, state)


@dataclass(frozen=True)
class Refusal:
    reason: str
    retry_after: float


RETRY_PROBES_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, HORIZON_S)
"""Instants at which a refused stream is tried again against the admitted streams as they will be then."""


def admission(
    admitted: list[StreamDemand],
    candidate: StreamDemand,
    *,
    under_way: Sequence[tuple[float, int | None]] = (),
    pool: Pool = ONE_LANE,
    max_start_wait: float,
) -> Refusal | None:
    """Whether `candidate` may join `admitted` (None), or why not and when it would be admitted.

    Refused when, in the simulation, it would make an admitted stream that kept ahead of its listener run dry, run
    dry itself where alone it would not, raise the demand still running at the horizon above what the pool's lanes
    can do, or start its first step more than `max_start_wait` after the steps under way. Retry-After: the first of
    a few instants (`RETRY_PROBES_S`) at which the same check passes against the admitted streams as they will be
    then.
    """
    reason = _refusal(admitted, candidate, under_way, pool, max_start_wait)
    if reason is None:
        return None
    for probe in RETRY_PROBES_S:
        later = simulate(admitted, under_way, until=probe, pool=pool)
        if _refusal(later.state, candidate, (), pool, max_start_wait) is None:
            return Refusal(reason, later.at)
    latest = simulate(admitted, under_way, pool=pool)
    need = candidate.real_time_factor
    finishes = sorted(latest.finish.values())
    capacity = pool.capacity
    by_demand = next(
        (
            t
            for t in finishes
            if sum(s.real_time_factor for s in latest.state if latest.finish[s.id] > t) + need <= capacity
        ),
        finishes[-1] if finishes else HORIZON_S,
    )
    return Refusal(reason, max(HORIZON_S, by_demand))


def _refusal(
    admitted: list[StreamDemand],
    candidate: StreamDemand,
    under_way: Sequence[tuple[float, int | None]],
    pool: Pool,
    max_start_wait: float,
) -> str | None:
    without = simulate(admitted, under_way, pool=pool)
    joined = simulate([*admitted, candidate], under_way, pool=pool)
    cid = candidate.id
    if any(
        without.underrun[s.id] <= UNDERRUN_TOLERANCE_S < joined.underrun[s.id] - without.underrun[s.id]
        for s in admitted
    ):
        pushed = sum(joined.underrun[s.id] - without.underrun[s.id] > UNDERRUN_TOLERANCE_S for s in admitted)
        return f"{pushed} admitted stream(s) would run dry"
    # What the candidate would suffer or need even alone is no reason to refuse it.
    capacity = pool.capacity
    alone = (
        simulate([candidate], [(t, None) for t, _ in under_way], pool=pool)
        if joined.underrun[cid] or joined.demand_after > capacity
        else None
    )
    if alone is not None and joined.underrun[cid] > alone.underrun[cid] + UNDERRUN_TOLERANCE_S:
        return f"it would run dry for {joined.underrun[cid]:.1f} s"
    if alone is not None and joined.demand_after > max(capacity, alone.demand_after, without.demand_after) + 1e-9:
        return f"the streams would need {joined.demand_after:.2f}x the GPU thread"
    # Counted from when the first lane frees (a lane free now: from now), not from the end of every step under way.
    first_free = min((t for t, _ in under_way), default=0.0) if len(under_way) >= pool.lanes else 0.0
    wait = joined.start_wait.get(cid, joined.at) - first_free
    if wait > max_start_wait:
        return f"its first audio would wait {wait:.1f} s behind other streams"
    return None
