"""The bounds a new job must fit: its own size, its key's jobs, characters and disk, and the node's disk quota.

Disk counts each job's audio as made, or as foreseen until it is done (`foreseen_bytes`): a job admitted has room
for all of its audio."""

from __future__ import annotations

from collections.abc import Sequence

from errors import Busy, InsufficientStorage, PayloadTooLarge
from jobs.job_settings import JobSettings
from jobs.store import JobRecord

SPOKEN_CHARS_PER_S = 12.0
"""A low estimate of the characters spoken per second of audio: how much disk a text's audio is foreseen to take."""
COPIES = 2
"""A job keeps its pieces' PCM beside its finished file (which is no larger than the PCM as WAV)."""


def foreseen_bytes(chars: int, sample_rate: int) -> int:
    """Disk a job of `chars` characters is foreseen to take once done."""
    return int(COPIES * chars / SPOKEN_CHARS_PER_S * sample_rate * 2)


def check_size(settings: JobSettings, chars: int, chapters: int) -> None:
    """A 413 `job_too_long` for a job larger than one job may be."""
    if chars > settings.max_job_chars:
        raise PayloadTooLarge(
            f"the job's text is {chars} characters; a job takes at most {settings.max_job_chars}", code="job_too_long"
        )
    if chapters > settings.max_job_chapters:
        raise PayloadTooLarge(
            f"the job has {chapters} chapters; a job takes at most {settings.max_job_chapters}", code="job_too_long"
        )


def check_room(
    settings: JobSettings, key: str, chars: int, disk: int, jobs: Sequence[JobRecord], retry_after: float
) -> None:
    """Raise the bound a new job of `key` (`chars` characters, `disk` bytes foreseen) would exceed beside `jobs`
    (every job of the node): 429 `job_queue_full` for its key's jobs or characters waiting, 507
    `job_storage_full` for its key's disk or the node's."""
    own = [job for job in jobs if job.key == key]
    active = [job for job in own if not job.ended]
    if len(active) >= settings.max_jobs_per_key:
        raise Busy(
            f"this key has {len(active)} jobs queued or running (at most {settings.max_jobs_per_key}); wait for one "
            "to end, or cancel one",
            code="job_queue_full",
            retry_after=retry_after,
        )
    waiting = sum(job.chars_total - job.chars_done for job in active)
    if waiting + chars > settings.max_job_chars_per_key:
        raise Busy(
            f"this key has {waiting} characters in jobs still to synthesize; with this job's {chars} that is over "
            f"{settings.max_job_chars_per_key}",
            code="job_queue_full",
            retry_after=retry_after,
        )
    used = sum(job.disk_bytes for job in own)
    quota = settings.max_job_disk_bytes_per_key
    if quota and used + disk > quota:
        raise InsufficientStorage(
            f"this key's jobs take {used} bytes of disk; this job's audio (about {disk} bytes) would pass the "
            f"key's {quota}: delete finished jobs (DELETE /jobs/{{id}})",
            code="job_storage_full",
        )
    used = sum(job.disk_bytes for job in jobs)
    quota = settings.jobs_disk_quota_bytes
    if quota and used + disk > quota:
        raise InsufficientStorage(
            f"this node's jobs take {used} bytes of disk; this job's audio (about {disk} bytes) would pass its "
            f"quota of {quota}",
            code="job_storage_full",
        )
