"""The jobs' knobs, declared once: their `POLYTTS_*` settings, which `settings.Settings` composes beside the
service's own and the fair queue's."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from engines.base import EngineSettings

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class JobSettings(EngineSettings):
    """Background jobs: where they are kept, how they are cut, and their bounds (docs/api.md, "Jobs")."""

    jobs_dir: Path = PROJECT_ROOT / "jobs-data"
    """Folder of the job table (`jobs.sqlite3`) and each job's audio (`<job id>/`): keep it on a disk that survives
    a restart; a job belongs to the node whose folder holds it."""

    job_piece_chars: int = Field(800, ge=50, le=5000)
    """A job's text is cut into pieces of at most this many characters (at sentence ends where it can be), each
    synthesized as one request and stored when done: a crash or a drain loses at most the piece under way. Within
    POLYTTS_MAX_TEXT_CHARS."""

    max_job_chars: int = Field(500_000, ge=1)
    """Longest text one job may carry (all chapters together); longer is a 413 `job_too_long`. Its JSON body is
    bounded too, at 1 MiB."""

    max_job_chapters: int = Field(1000, ge=1)
    """Most chapters one job may have; more is a 413 `job_too_long`."""

    max_jobs_per_key: int = Field(4, ge=1)
    """Jobs one key may have queued or running at once; another is a 429 `job_queue_full`."""

    max_job_chars_per_key: int = Field(2_000_000, ge=1)
    """Characters one key may have queued or running in jobs; more is a 429 `job_queue_full`."""

    max_job_disk_bytes_per_key: int = Field(4 * 1024**3, ge=0)
    """Disk one key's jobs may use (their audio, made and foreseen); more is a 507 `job_storage_full`. 0: no bound
    per key."""

    jobs_disk_quota_bytes: int = Field(20 * 1024**3, ge=0)
    """Disk all jobs of this node together may use (made and foreseen); more is a 507 `job_storage_full`. 0: no
    bound."""

    job_retention_s: float = Field(7 * 24 * 3600.0, gt=0)
    """A job that ended (done, failed or cancelled) is removed with its audio this long after it ended."""

    job_webhook_attempts: int = Field(5, ge=1, le=20)
    """Calls of a job's webhook before it is given up (each after twice the wait of the one before, from
    POLYTTS_JOB_WEBHOOK_FIRST_WAIT_S); counted in the job table, so a restart goes on with the count and the wait."""

    job_webhook_first_wait_s: float = Field(1.0, gt=0, le=3600)
    """Wait after a job's first failed webhook call; each later wait is twice the one before."""
