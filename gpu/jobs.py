"""One synthesis job as the GPU thread runs it: its steps, its audio handed over to the event loop, cancellation.

A job's steps run on the GPU thread (each step is one text chunk, an iterator of audio pieces); its reader awaits
the pieces on the event loop (`Job.pieces`), and taking a piece is what moves the job's playback clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines.step_stop import StepStop
from errors import ClientDisconnected, ServiceError
from gpu.playback import Playback

DONE = object()
"""Delivered after a job's last piece: its reader's iteration ends there."""

ANONYMOUS = "anonymous"
"""The fairness key of a request that names none (on a node without API keys): shared by unrelated clients."""

CLIENT_GONE = "client disconnected"
"""The reason a job is cancelled when its client went away."""


class JobCancelled(ServiceError):
    """The job was dropped before it finished: its client went away or it ran past its deadline."""

    code = "request_timeout"


class ReaderStalled(ClientDisconnected):
    """The job's reader took no audio for too long: the job is dropped and its connection closed."""

    code = "reader_stalled"


@dataclass(eq=False)
class Job:
    """One synthesis request. `steps` is created and consumed on the GPU thread: each item it yields is one step,
    an iterable of pieces: audio (float32 arrays of `sample_rate` samples per second) and what the reader takes
    between them (word timings), handed over as they are."""

    engine: str
    chars: int
    steps: Callable[[], Iterator[Iterable[Any]]]
    loop: asyncio.AbstractEventLoop
    key: str = ANONYMOUS
    deadline: float | None = None
    """time.monotonic() after which the job is dropped before its next step."""
    streaming: bool = False
    """Its audio is played while it arrives: its steps follow its listener's playback clock, and admission keeps
    it in real time. Whole-file responses are not streams."""
    sample_rate: int = 0
    """Samples per second of the pieces; 0 (unknown) plans the job as whole-file work."""
    unit_chars: tuple[int, ...] = ()
    """Characters of text of each step, in order: how admission estimates the audio and GPU time still to come."""
    client: str | None = None
    """The client's address: one address holds at most `max_client_share` of the admission slots."""
    background: bool = False
    """A step of a background job (jobs/): the lowest class of the queue, picked only when no other job can step and
    none is under way; it holds no admission place (jobs/ bounds its own)."""
    id: int = 0
    submitted_at: float = field(default_factory=time.perf_counter)
    enqueued_at: float = 0.0
    last_served_at: float | None = None
    """FairQueue clock time of the job's last step: how long it has waited since is what the engine switch bound
    measures."""
    started_at: float | None = None
    units_total: int | None = None
    """Steps the job will take, when known (`unit_chars` sets it): the last one then also ends the job, without
    another turn."""
    ready: Callable[[], bool] | None = None
    """Whether the job has a step to take now (its chunk source's `ready`: always for a planned text; a live
    request's only once its text has come). A job that has none is passed over: waiting for text holds no step of the
    GPU thread."""
    shorten: Callable[[int, bool], tuple[int, int] | None] | None = None
    """Cuts the next step short, after its leading clauses within this many characters (a planned text's chunk
    source; True: at a word gap inside a clause where that is the only cut): the characters of the two steps it
    becomes, or None where it cannot be. None: never cut."""
    give_back: Callable[[], None] | None = None
    """Gives the chunk of the step just taken back to its source, to be taken again by the next step: how a step
    stopped for an arrival before it delivered anything is said again later (None: it cannot be)."""
    cuts: Callable[[int], list[tuple[int, ...]]] | None = None
    """For each step not taken yet, the characters of the short steps it would become, cut wherever it can be within
    this many characters each (admission plans the short steps a stream will take)."""
    input_waited_at: float | None = None
    """FairQueue clock time at which the job was last seen waiting for text (a live request's): the playback clock
    starts again after it, so a listener who ran dry while the client wrote nothing is no underrun."""
    units_done: int = 0
    spoken_chars: int = 0
    """Characters of the units whose audio began to reach the reader, as each unit says (its `chars`, when it has
    one): what a request cut short said."""
    yielded: bool = False
    """A step of it (a stream's) was stopped for a newcomer before it delivered anything: until its listener's audio
    covers its next step again, each step ends before its listener runs dry, inside a clause if need be
    (`gpu.ordering.chars_in_time`)."""
    gpu_seconds: float = 0.0
    delivered: int = 0
    consumed: int = 0
    cancel_reason: str | None = None
    cancel_error: ServiceError | None = None
    cancelled: StepStop = field(default_factory=StepStop)
    """Set once the job is cancelled; setting it also stops the step under way, where its engine can
    (`engines.step_stop`)."""
    detached: bool = False
    """Its reader fell behind real time: it holds no admission slot and steps only once its audio is taken."""
    playback: Playback = field(default_factory=Playback)
    close_connection: Callable[[], None] | None = None
    """Closes the client's connection at once, on the event loop: how a reader that never reads is let go (a
    response blocked on a full socket notices nothing else)."""
    _units: Iterator[Iterable[Any]] | None = None
    _out: asyncio.Queue[tuple[Any, float, float]] = field(default_factory=asyncio.Queue)
    _on_consumed: Callable[[], None] = lambda: None
    _on_stall: Callable[[Job, float], None] = lambda job, seconds: None
    _discard_audio: bool = False

    def __post_init__(self) -> None:
        if self.unit_chars and self.units_total is None:
            self.units_total = len(self.unit_chars)

    def cancel(
        self, reason: str = CLIENT_GONE, *, discard_audio: bool = False, error: ServiceError | None = None
    ) -> None:
        """Drop the job before its next step, and stop the step under way where its engine can; `discard_audio`
        also frees the audio waiting for its reader; `error` is what its reader gets (JobCancelled naming the reason
        by default)."""
        if not self.cancelled.is_set():
            self.cancel_reason = reason
            self.cancel_error = error
            self._discard_audio = discard_audio
            self.cancelled.set()
            self._on_consumed()  # a job parked on a full buffer must be seen, and dropped

    def drop_stalled(self, reason: str) -> None:
        """Its reader takes nothing: drop the job, free its waiting audio, and close the connection."""
        self.cancel(reason, discard_audio=True, error=ReaderStalled(f"request dropped: {reason}"))
        if self.close_connection is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: so is the connection
                self.loop.call_soon_threadsafe(self.close_connection)

    def dropped(self) -> ServiceError:
        """What the reader of a cancelled job gets."""
        return self.cancel_error or JobCancelled(f"request dropped: {self.cancel_reason}")

    @property
    def awaiting_input(self) -> bool:
        """A live request with no step to take until its client sends more text."""
        return self.ready is not None and not self.ready()

    @property
    def buffered(self) -> int:
        return self.delivered - self.consumed

    @property
    def is_stream(self) -> bool:
        """Planned as a real-time stream (a stream whose audio duration is known)."""
        return self.streaming and self.sample_rate > 0

    @property
    def underrun_s(self) -> float:
        """Time a listener playing in real time from the first byte would have stalled waiting for the GPU thread."""
        return self.playback.underrun_s

    @property
    def underruns(self) -> int:
        return self.playback.underruns

    def cut_next_step(self, max_chars: int, inside_clauses: bool = False) -> bool:
        """Cut the next step after its leading clauses within `max_chars` (`inside_clauses`: at a word gap inside its
        first clause, where that is longer); whether it was (its plan then has one step more)."""
        done = self.units_done
        if self.shorten is None or done >= len(self.unit_chars):
            return False
        cut = self.shorten(max_chars, inside_clauses)
        if cut is None:
            return False
        self.unit_chars = (*self.unit_chars[:done], *cut, *self.unit_chars[done + 1 :])
        self.units_total = len(self.unit_chars)
        return True

    def chars_left(self) -> list[int]:
        """Characters of each step not yet finished (the step under way included)."""
        if self.unit_chars:
            return list(self.unit_chars[self.units_done :])
        total = self.units_total or 1
        return [self.chars // total] * max(0, total - self.units_done)

    def _deliver(self, item: Any) -> None:
        self.delivered += 1
        seconds = len(item) / self.sample_rate if isinstance(item, np.ndarray) and self.is_stream else 0.0
        self.playback.delivered(seconds)
        ending = not isinstance(item, np.ndarray)
        try:
            if ending and self._discard_audio:
                self.loop.call_soon_threadsafe(self._discard_then_put, item)
            else:
                self.loop.call_soon_threadsafe(self._out.put_nowait, (item, time.monotonic(), seconds))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancel("server stopping")

    def _discard_then_put(self, item: Any) -> None:
        while not self._out.empty():
            self._out.get_nowait()
        self._out.put_nowait((item, time.monotonic(), 0.0))

    async def pieces(self) -> AsyncIterator[Any]:
        """Pieces as the GPU thread produces them; raises what the engine raised. Taking a piece is what
        moves the playback clock: the response writer asks for the next one once it has sent the last."""
        while True:
            self.playback.ask(time.monotonic())
            self._on_consumed()  # a detached job steps again once its writer asks
            item, produced_at, seconds = await self._out.get()
            self.consumed += 1
            stall = self.playback.sent(seconds, produced_at, time.monotonic(), self.input_waited_at)
            if stall:
                self._on_stall(self, stall)
            self._on_consumed()
            if item is DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
