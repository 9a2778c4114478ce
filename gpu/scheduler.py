"""The scheduler: the fair queue driving the GPU thread, one step of one job at a time.

It admits jobs into the queue (`gpu.fairness.FairQueue`), hands the GPU thread (`gpu.gpu_thread.GpuThread`) the
step of the job the queue picks (to a lane, for an engine that runs several steps at once), cuts a stream's step
short where the queue says, delivers each audio piece to the job's reader as it is produced, charges the step's GPU
time to the job's key and learns the engine's speed from it, and drops cancelled jobs before their next step (the step
under way of one stops early where its engine can, `engines.step_stop`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from engines.device import running_step
from engines.step_stop import StepStop, StepStopped, within
from errors import ServiceError
from gpu.fairness import FairQueue
from gpu.gpu_thread import GpuThread, Step
from gpu.jobs import DONE, Job
from gpu.scheduling_settings import SchedulingSettings

log = logging.getLogger("polytts.scheduler")


class Scheduler:
    """The fair queue driving the GPU thread: admission, one step at a time (a few at once on an engine's lanes),
    cancellation before the next step."""

    def __init__(
        self,
        gpu: GpuThread,
        settings: SchedulingSettings,
        resident: Callable[[], Collection[str]],
        lanes: Callable[[str], int] = lambda engine: 1,
        shared_keys: Collection[str] = frozenset(),
        stops_cheaply: Callable[[str], bool] = lambda engine: True,
    ) -> None:
        """`lanes`: how many steps an engine runs at once (its steps then run on the GPU thread's lanes).
        `shared_keys`: fairness keys that unrelated clients share (`FairQueue`). `stops_cheaply`: whether an engine's
        step may be stopped for an arrival (a stop that slows the engine's next step would cost the arrival more than
        the step it stopped)."""
        self.gpu = gpu
        self.lanes = lanes
        self.stops_cheaply = stops_cheaply
        self.queue = FairQueue(settings, lanes=lanes, shared_keys=shared_keys)
        self.resident = resident
        self._lock = threading.Lock()
        self._stoppable: dict[Job, StepStop] = {}
        """The stops of the steps under way that have delivered nothing yet and may be stopped for an arrival (a
        background job's, a stream's past its first step: `gpu.ordering.yields_to`); the job says the step again."""
        self._arrivals = 0
        """Interactive arrivals so far: one that came between a background step's pick and its start stops it too."""
        gpu.attach(self._next_step)

    def policy(self) -> dict[str, Any]:
        """The fair queue's weights and bounds, as /admin/scheduler shows them."""
        return self.queue.policy()

    def submit(self, job: Job) -> Job:
        """Admit the job or raise Busy (429); decided at once, before any audio is sent."""
        job._on_consumed = self.gpu.wake
        job._on_stall = self.queue.record_stall
        self.queue.add(job)
        log.debug("job %d (key %s, %s) admitted", job.id, job.key, _kind(job))
        if job.background:
            self.gpu.wake()
        else:
            self.arrived(job)
        return job

    def arrived(self, job: Job | None) -> None:
        """Interactive work can step now (`job` admitted, or a live job's text come): a step under way that has
        delivered nothing yet and yields to it (a background job's; a stream's ahead of its listener, for a
        newcomer: `gpu.ordering.yields_to`) is stopped where its engine can stop it (`engines.step_stop`), so the
        arrival waits milliseconds instead of a step; that job says its step again later."""
        with self._lock:
            self._arrivals += 1
            stoppable = list(self._stoppable.items())
        for running, stop in stoppable:
            if self.queue.yields_to(running, job):
                with self._lock:  # not once its audio is out: it could not be said again
                    if self._stoppable.get(running) is stop:
                        stop.set()
        self.gpu.wake()

    def stats(self) -> dict[str, Any]:
        return self.queue.stats()

    def cancel_all(self, reason: str, error: ServiceError) -> int:
        """Drop every admitted job before its next step (a drain whose time is up); returns how many."""
        jobs = self.queue.jobs()
        for job in jobs:
            job.cancel(reason, error=error)
        self.gpu.wake()
        return len(jobs)

    def _next_step(self) -> Step | None:
        arrivals = self._arrivals
        job = self.queue.pick(self.resident())
        if job is None:
            return None
        beside = self.queue.runs_beside(job)
        alongside = self.lanes(job.engine) > 1 and not job.cancelled.is_set()
        stop = StepStop()
        # A step can be said again only by a source that takes its chunk back; a stream's first step never yields.
        yields = job.background or (job.is_stream and job.units_done)
        if yields and job.give_back is not None and self.stops_cheaply(job.engine):
            with self._lock:
                self._stoppable[job] = stop
                if job.background and self._arrivals != arrivals:
                    stop.set()
        return Step(lambda: self._step(job, stop, beside), alongside=alongside)

    def _step(self, job: Job, stop: StepStop, beside: bool = False) -> None:
        """Run one step of `job` on the GPU thread (or a lane, `beside` other steps or alone), handing each piece over
        as it is produced. The step runs within a stop of its own, which the job's cancellation sets, and an arrival
        it yields to (`arrived`)."""
        began = time.perf_counter()
        ending: Any = None  # how the job ends with this step, if it does
        stopped = False
        audio_s: float | None = None  # audio of a step that ran to its end
        delivered = job.delivered
        try:
            if self.queue.cut_step(job):
                log.debug(
                    "job %d (key %s) step %d cut to %d chars",
                    job.id,
                    job.key,
                    job.units_done + 1,
                    job.unit_chars[job.units_done],
                )
            with running_step(beside), job.cancelled.hooked(stop.set), within(stop):
                ending, audio_s = self._run_unit(job, began)
        except StepStopped:  # cancelled, or stopped for an arrival: the engine is free already
            if job.cancelled.is_set():
                ending, stopped = job.dropped(), True
            elif job.delivered != delivered or job.give_back is None:  # stopped in a later inference of its unit
                ending = RuntimeError("a step was stopped for an arrival after it had delivered audio")
            else:
                job.give_back()
                job.yielded = not job.background
                log.debug(
                    "job %d (key %s, %s) stopped %.3fs into its step for an arrival",
                    job.id,
                    job.key,
                    _kind(job),
                    time.perf_counter() - began,
                )
        except Exception as exc:  # handed to the request
            ending = exc
        finally:
            with self._lock:
                self._stoppable.pop(job, None)
            # Accounted before the job's end is delivered, so its timings include this step.
            spent = time.perf_counter() - began
            # In the order steps ran: what a newcomer waited for is read from these lines (debug level only).
            log.debug("job %d (key %s, %s) step %d took %.3fs", job.id, job.key, _kind(job), job.units_done, spent)
            job.gpu_seconds += spent
            overlap = self.queue.charge(job, spent)
            if audio_s:
                self.queue.learn(job, spent, audio_s, overlap)
            if ending is not None:
                self._finish(job, ending, spent if stopped else None)

    def _run_unit(self, job: Job, began: float) -> tuple[Any, float | None]:
        """One unit of the job: how the job ends with it (done or cancelled; None when it goes on), and the audio
        seconds the unit made when it ran to its end and the job's sample rate is known."""
        if job.cancelled.is_set():
            return job.dropped(), None
        if job._units is None:
            job.started_at = began
            job._units = job.steps()
        unit = next(job._units, None)
        if unit is None:
            return DONE, None
        samples = 0
        said = False
        try:
            for piece in unit:
                if not said:  # its audio is out: the step can no longer be said again
                    with self._lock:
                        self._stoppable.pop(job, None)
                    said = True
                audio = isinstance(piece, np.ndarray)  # word timings come between pieces
                if audio and not samples:  # counted said before its audio reaches the reader, who may leave at once
                    job.spoken_chars += getattr(unit, "chars", 0)
                job._deliver(piece)
                if audio:
                    samples += len(piece)
                if job.cancelled.is_set():  # a native stream is closed, not run to its end
                    break
        finally:
            close = getattr(unit, "close", None)
            if close is not None:
                close()
        job.units_done += 1
        if job.cancelled.is_set():
            return job.dropped(), None
        audio_s = samples / job.sample_rate if job.sample_rate else None
        if job.units_total is not None and job.units_done >= job.units_total:
            return DONE, audio_s
        return None, audio_s

    def _finish(self, job: Job, outcome: Any, stopped_after: float | None = None) -> None:
        """`stopped_after`: seconds into its step at which the job's step under way was stopped, if it was."""
        if job._units is not None:
            close = getattr(job._units, "close", None)
            if close is not None:
                close()  # runs the job's own clean-up (e.g. releasing MLX memory) here, on the GPU thread
        if stopped_after is not None:
            log.info(
                "job %d (key %s) stopped %.3fs into its step: %s", job.id, job.key, stopped_after, job.cancel_reason
            )
        elif outcome is not DONE and job.cancelled.is_set():
            log.info("job %d (key %s) dropped before its next step: %s", job.id, job.key, job.cancel_reason)
        self.queue.remove(job)
        job._deliver(outcome)


def _kind(job: Job) -> str:
    """The job's class in the debug lines: a background job's step, a stream's, or a whole file's."""
    return "background" if job.background else "stream" if job.streaming else "file"
