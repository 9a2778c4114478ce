"""Readers that fall behind: a streamed response whose reader is `slow_reader_lag_s` behind real time stops holding
an admission slot (it is detached, and steps only once its audio is taken), and one whose reader takes no audio for
`reader_idle_limit_s` while audio waits is dropped. The fair queue sweeps its jobs before each decision."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gpu.jobs import Job
from gpu.scheduling_settings import SchedulingSettings

log = logging.getLogger("polytts.scheduler")


def sweep(jobs: Iterable[Job], settings: SchedulingSettings, now: float) -> None:
    """Readers behind real time stop holding a slot; readers that take nothing for too long are dropped."""
    for job in jobs:
        if job.cancelled.is_set():
            continue
        idle = job.playback.idle_for(now)
        if idle >= settings.reader_idle_limit_s:
            log.warning(
                "job %d (key %s, client %s) dropped: its reader took no audio for %.0f s (limit %.0f s)",
                job.id,
                job.key,
                job.client,
                idle,
                settings.reader_idle_limit_s,
            )
            job.drop_stalled(f"its reader took no audio for {idle:.0f} s")
        elif job.streaming and not job.detached and job.playback.reader_lag(now) >= settings.slow_reader_lag_s:
            job.detached = True
            log.info(
                "job %d (key %s, client %s) detached: its reader is %.0f s behind real time; it holds no slot now",
                job.id,
                job.key,
                job.client,
                job.playback.reader_lag(now),
            )
