"""Real-time streams: what a listener has in hand, how fast each engine makes audio, and whether the GPU thread can
keep one more stream ahead of its listener.

A streamed response has a playback clock: a listener who starts playing at the first byte, plays in real time and
pauses when it runs dry. `Playback` follows that clock from what the response writer takes from the job and from
when it asks for more (it asks once it has sent the last piece). A stall is an underrun only when the writer was
asking and the audio came late from the GPU thread; a writer still busy sending when a real-time listener would long
have run out has a reader *behind real time*.

`EngineSpeed` learns an engine's GPU seconds and audio seconds per character of text from the steps it runs.

`simulate` plays the GPU thread's next minute for a set of streams the way the scheduler serves them (first steps of
streams not yet started first, in order of arrival, then the stream that runs dry soonest), so admission can see
whether one more stream would make an admitted stream run dry (`admission`).
"""

from __future__ import annotations

import collections
import heapq
import statistics
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


@dataclass
class EngineSpeed:
    """GPU seconds and audio seconds per character of one engine, the median of its last steps (a step that also
    loaded the model or prepared a voice does not skew it); a pessimistic prior until the first step."""

    window: int = 16
    _gpu: collections.deque[float] = field(default_factory=collections.deque)
    _audio: collections.deque[float] = field(default_factory=collections.deque)

    def learn(self, chars: int, gpu_s: float, audio_s: float) -> None:
        if chars <= 0 or gpu_s <= 0 or audio_s <= 0:
            return
        for samples, value in ((self._gpu, gpu_s / chars), (self._audio, audio_s / chars)):
            samples.append(value)
            if len(samples) > self.window:
                samples.popleft()

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
    streams: list[StreamDemand], busy_for: float = 0.0, running: int | None = None, until: float = HORIZON_S
) -> Simulation:
    """Serve `streams` the way the scheduler does, from now (0) until `until`; `busy_for` seconds are left of the
    step under way, which is the first unit of stream `running`, or other work when `running` is None."""
    left = {s.id: collections.deque(s.units) for s in streams}
    ends = {s.id: s.in_hand for s in streams}
    arrival = {s.id: s.arrival for s in streams}
    underrun = {s.id: 0.0 for s in streams}
    finish = {s.id: 0.0 for s in streams}
    start_wait: dict[int, float] = {}

    def produce(sid: int, at: float) -> None:
        audio = left[sid].popleft()[1]
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

    now = busy_for
    if running is not None and left.get(running):
        if ends[running] is None:
            start_wait[running] = 0.0
        produce(running, now)
    queue = [urgency(sid) for sid, units in left.items() if units]
    heapq.heapify(queue)
    steps = 0
    while queue and now < until and steps < MAX_SIMULATED_STEPS:
        _, _, sid = heapq.heappop(queue)
        if ends[sid] is None:
            start_wait[sid] = now
        now += left[sid][0][0]
        produce(sid, now)
        steps += 1
        if left[sid]:
            heapq.heappush(queue, urgency(sid))
    state = [
        StreamDemand(sid, list(units), None if (end := ends[sid]) is None else end - now, arrival[sid])
        for sid, units in left.items()
        if units
    ]
    demand = sum(s.real_time_factor for s in state)
    for stream in state:  # beyond the end each stream gets its share of the thread: done after `demand` x its audio
        finish[stream.id] = now + max(demand, 1.0) * sum(audio for _, audio in stream.units)
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
    busy_for: float = 0.0,
    running: int | None = None,
    max_start_wait: float,
) -> Refusal | None:
    """Whether `candidate` may join `admitted` (None), or why not and when it would be admitted.

    Refused when, in the simulation, it would make an admitted stream that kept ahead of its listener run dry, run
    dry itself where alone it would not, raise the demand still running at the horizon above the whole GPU thread,
    or start its first step more than `max_start_wait` after the step under way. Retry-After: the first of a few
    instants (`RETRY_PROBES_S`) at which the same check passes against the admitted streams as they will be then.
    """
    reason = _refusal(admitted, candidate, busy_for, running, max_start_wait)
    if reason is None:
        return None
    for probe in RETRY_PROBES_S:
        later = simulate(admitted, busy_for, running, until=probe)
        if _refusal(later.state, candidate, 0.0, None, max_start_wait) is None:
            return Refusal(reason, later.at)
    latest = simulate(admitted, busy_for, running)
    need = candidate.real_time_factor
    finishes = sorted(latest.finish.values())
    by_demand = next(
        (t for t in finishes if sum(s.real_time_factor for s in latest.state if latest.finish[s.id] > t) + need <= 1),
        finishes[-1] if finishes else HORIZON_S,
    )
    return Refusal(reason, max(HORIZON_S, by_demand))


def _refusal(
    admitted: list[StreamDemand], candidate: StreamDemand, busy_for: float, running: int | None, max_start_wait: float
) -> str | None:
    without = simulate(admitted, busy_for, running)
    joined = simulate([*admitted, candidate], busy_for, running)
    cid = candidate.id
    if any(
        without.underrun[s.id] <= UNDERRUN_TOLERANCE_S < joined.underrun[s.id] - without.underrun[s.id]
        for s in admitted
    ):
        pushed = sum(joined.underrun[s.id] - without.underrun[s.id] > UNDERRUN_TOLERANCE_S for s in admitted)
        return f"{pushed} admitted stream(s) would run dry"
    # What the candidate would suffer or need even alone is no reason to refuse it.
    alone = simulate([candidate], busy_for) if joined.underrun[cid] or joined.demand_after > 1.0 else None
    if alone is not None and joined.underrun[cid] > alone.underrun[cid] + UNDERRUN_TOLERANCE_S:
        return f"it would run dry for {joined.underrun[cid]:.1f} s"
    if alone is not None and joined.demand_after > max(1.0, alone.demand_after, without.demand_after) + 1e-9:
        return f"the streams would need {joined.demand_after:.2f}x the GPU thread"
    wait = joined.start_wait.get(cid, joined.at) - busy_for
    if wait > max_start_wait:
        return f"its first audio would wait {wait:.1f} s behind other streams"
    return None
