"""Which job steps next on the GPU thread, and how long its step is.

A chunk is one whole generation of engines that cannot interleave (VoxCPM's single KV cache), so a step is one
text chunk and two generations never share a model. Who steps next (`pick`), after dropping cancelled jobs:
1. the first step of a stream not yet started, in order of arrival, whatever its key: a newcomer waits for at
   most the step under way (and the first steps of streams that arrived just before it);
2. a running stream about to run dry: its listener's audio in hand (`playback.Playback`) no longer covers its next
   step, the longest whole-file step that could run first and `stream_max_start_wait_s` of newcomers' first
   steps; the one closest to running dry goes first;
3. whole-file work (`/tts`, batch), by weighted fair share between keys: the key with the least GPU time used
   divided by its weight; a key's whole-file jobs keep their order;
4. streams far ahead of their listeners, closest to running dry first;
5. responses whose readers fell behind real time (detached), once their writer has sent all their audio and asks
   for more;
6. background jobs (jobs/: hours of speech made for later), oldest step first, only when no other job can step and
   no step is under way: a newcomer or a stream waits for at most one background step.
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

A newcomer thus waits for the steps under way: a stream ahead of its listener takes a short step
(`short_step_chars`: its chunk cut after a clause, about `short_step_s` long, beside the other steps under way), and
its whole chunk again when it runs low (its listener holds less than a short step: it runs dry whatever it takes,
and the whole chunk makes the most audio per GPU second). Where the engine can stop a step under way, a stream's step
that has delivered nothing yet is stopped for a newcomer while its listener can spare the wait (`yields_to`), so a
newcomer's wait does not grow with the clause lengths of the streams playing; the stream says its step again after,
ending before its listener runs dry (inside a clause, at a word gap, if no clause ends in time)."""

from __future__ import annotations

from collections.abc import Collection

from gpu.jobs import Job
from gpu.queue_state import KeyState, QueueState


def pick(state: QueueState, resident: Collection[str], now: float) -> Job | None:
    """The job that steps next (see the module's docstring), among jobs that can step now: beside the steps under
    way, when their engine runs several at once. Its step is counted as under way."""
    for job in state.admitted():
        if job in state.running:
            continue
        if job.deadline is not None and now >= job.deadline:
            job.cancel("request timed out")
        if job.cancelled.is_set():  # dropping one costs no GPU time: do it first, wherever it waits
            return state.begin_step(job, now, beside=False)
    jobs = [j for key in state.keys.values() for j in key.jobs if not j.background]
    candidates = [j for j in jobs if j.is_stream or j.detached]
    candidates += [head for key in state.keys.values() if (head := _whole_file_head(key))]
    ready = [j for j in candidates if j not in state.running and _can_step(state, j, now)]
    if state.running:
        ready = _alongside(state, ready, now)
    elif not ready:
        ready = _background(state, now)
    if not ready:
        return None
    on_resident = [j for j in ready if j.engine in resident]
    elsewhere = [j for j in ready if j.engine not in resident]
    if on_resident and elsewhere:
        # Waiting counts from a job's last step (or its admission): right after a switch, the engine left
        # behind has to wait the whole bound again, so engines do not swap on every step.
        oldest = min(j.last_served_at or j.enqueued_at for j in elsewhere)
        ready = elsewhere if now - oldest >= state.settings.engine_switch_max_wait_s else on_resident
    state.raise_floor()
    chosen = _choose(state, ready, now)
    beside = not _first_step(chosen) and (bool(state.running) or _goes_with_another(state, chosen, ready))
    return state.begin_step(chosen, now, beside)


def short_step_chars(state: QueueState, job: Job, now: float) -> int | None:
    """The characters to cut the next step of a job just picked to (after a clause): for a stream ahead of its
    listener, about `short_step_s` beside the steps under way (a newcomer arriving now would wait for it); for a
    background job's, `background_step_chars`. None when it takes its whole chunk."""
    settings = state.settings
    if job.background:  # nobody listens to it as it comes: every step short, by a measure that never varies
        return (settings.background_step_chars or None) if job.shorten is not None else None
    if settings.short_step_s <= 0 or not job.is_stream or job.detached or not job.units_done or job.shorten is None:
        return None
    in_hand = job.playback.in_hand(now)
    # Running low (less than a short step in hand) it runs dry whatever it takes: its whole chunk is the most audio
    if in_hand is None or in_hand < settings.short_step_s:
        return None
    # GPU seconds alone that last about `short_step_s` beside the steps under way (a newcomer waits for them all);
    # a step that starts beside others has company from the start, if not yet on a lane
    pool = state.pool(job.engine)
    at_once = max(len(state.running), 2) if state.running[job].beside else 1
    alone_s = settings.short_step_s / pool.slowdown[min(at_once, pool.lanes) - 1]
    if state.next_step_s(job) <= alone_s:
        return None
    return max(1, int(alone_s / state.speed(job.engine).gpu_s_per_char))


def ends_in_time(state: QueueState, job: Job, now: float) -> bool:
    """Whether the stream's next step, as it stands, ends while its listener still holds `_IN_TIME_MARGIN_S` of
    audio."""
    in_hand = job.playback.in_hand(now)
    return in_hand is not None and state.next_step_s(job) <= in_hand - _IN_TIME_MARGIN_S


def chars_in_time(state: QueueState, job: Job, now: float) -> int | None:
    """For a stream that gave its step to a newcomer (`yields_to`) and whose next step would not end in time
    (`ends_in_time`): the characters of a step that does (the step is cut there, at a word gap if no clause ends in
    time); None when nothing worth a step can."""
    in_hand = job.playback.in_hand(now)
    if in_hand is None or job.shorten is None:
        return None
    chars = int((in_hand - _IN_TIME_MARGIN_S) / state.speed(job.engine).gpu_s_per_char)
    return chars if chars >= _MIN_STEP_CHARS else None


_IN_TIME_MARGIN_S = 0.3
"""What the engine's speed estimate may be off by over one step."""

_MIN_STEP_CHARS = 12
"""A step shorter than this (two or three words) costs the model's padding for too little speech."""


def yields_to(state: QueueState, job: Job, arrival: Job | None, now: float) -> bool:
    """Whether the step under way of `job`, which has delivered nothing yet, is stopped for `arrival` (a job admitted,
    or a live job whose phrase has come), to be said again after it: a background job's for any interactive arrival;
    a stream's for a newcomer's first step while its listener holds the first steps of every newcomer waiting and
    `stream_yield_s` more (its step said again then ends before its listener runs dry: `chars_in_time`)."""
    if job.background:
        return True
    settings = state.settings
    if settings.stream_yield_s <= 0 or arrival is None or not _first_step(arrival) or arrival.awaiting_input:
        return False
    if not job.is_stream or job.detached or not job.units_done or job.playback.reader_lag(now):
        return False
    in_hand = job.playback.in_hand(now)
    newcomers = [j for j in state.admitted() if _first_step(j) and j not in state.running and not j.awaiting_input]
    return in_hand is not None and in_hand >= sum(state.next_step_s(j) for j in newcomers) + settings.stream_yield_s


def _goes_with_another(state: QueueState, job: Job, ready: list[Job]) -> bool:
    """Whether a step starting alone has company coming: another job of its engine ready to start beside it.
    Then both run beside each other from the start, each on its share of the threads (two inferences of one
    thread each make more audio per second than one of two threads after the other; a two-thread inference
    beside a one-thread one makes less than either)."""
    if state.lanes(job.engine) < 2 or _first_step(job):
        return False
    return any(j is not job and j.engine == job.engine and not _first_step(j) for j in ready)


def _alongside(state: QueueState, ready: list[Job], now: float) -> list[Job]:
    """Of the jobs ready, those that may start while the steps under way run: their engine's, while it has a lane
    free. A newcomer's first step takes the first lane free, with all the engine's threads (the steps under way
    end soon: they are short), and nothing else starts while one waits. Beside a step alone (a first step, or one
    that had no company when it began) only streams that would run dry before it ends start. Once another
    engine's request has waited `engine_switch_max_wait_s`, nothing starts: the lanes drain for the switch."""
    engine = next(iter(state.running)).engine
    if len(state.running) >= state.lanes(engine):
        return []
    others = [j for j in ready if j.engine != engine]
    if (
        others
        and now - min(j.last_served_at or j.enqueued_at for j in others) >= state.settings.engine_switch_max_wait_s
    ):
        return []
    same = [j for j in ready if j.engine == engine]
    first_steps = [j for j in same if _first_step(j)]
    if first_steps:  # it starts on the free lane at once, and nothing else does
        return first_steps
    alone = [(j, step.since) for j, step in state.running.items() if not step.beside]
    if alone:
        left = max(state.next_step_s(j) - (now - since) for j, since in alone)
        same = [j for j in same if j.is_stream and not j.detached and state.slack(j, now) < left]
    return same


def _first_step(job: Job) -> bool:
    return job.is_stream and not job.detached and job.units_done == 0


def _can_step(state: QueueState, job: Job, now: float) -> bool:
    """Room in its buffer (a detached job steps only when its writer asks for audio and none waits), and a step
    to take (a live job waiting for text has none)."""
    if job.awaiting_input:
        job.input_waited_at = now
        return False
    if job.detached:
        return job.buffered == 0 and job.playback.asking_since is not None
    return job.buffered < state.settings.max_buffered_pieces


def _choose(state: QueueState, ready: list[Job], now: float) -> Job:
    newcomers = [j for j in ready if j.is_stream and not j.detached and j.units_done == 0]
    if newcomers:
        return min(newcomers, key=lambda j: (j.enqueued_at, j.id))
    streams = [(state.slack(j, now), j.id, j) for j in ready if j.is_stream and not j.detached]
    whole = [j for j in ready if not j.is_stream and not j.detached]
    # Room for the longest whole-file step that could go first, and for newcomers' first steps after it.
    guard = state.settings.stream_max_start_wait_s + max((state.next_step_s(j) for j in whole), default=0.0)
    # A stream whose reader is behind real time is not short of audio because of us: never urgent.
    urgent = [e for e in streams if e[0] < guard and not e[2].playback.reader_lag(now)]
    if urgent:
        return min(urgent, key=lambda e: (e[0], e[1]))[2]
    if whole:
        return min(whole, key=lambda j: (state.keys[j.key].virtual, state.keys[j.key].last_served))
    if streams:
        return min(streams, key=lambda e: (e[0], e[1]))[2]
    return min(ready, key=lambda j: (j.last_served_at or j.enqueued_at, j.id))


def _whole_file_head(key: KeyState) -> Job | None:
    return next((j for j in key.jobs if not j.is_stream and not j.detached and not j.background), None)


def _background(state: QueueState, now: float) -> list[Job]:
    """The background job whose last step is oldest (or, never served, which came first), when it can step."""
    waiting = [j for j in state.admitted() if j.background and _can_step(state, j, now)]
    return [min(waiting, key=lambda j: (j.last_served_at or j.enqueued_at, j.id))] if waiting else []
