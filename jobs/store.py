"""Where jobs are kept: the job table in SQLite (WAL mode) and each job's audio beside it, one folder per job.

A piece's PCM is written to a temporary file, flushed to disk and renamed into place before the table says it is
done; the finished file the same way. After a crash, a piece whose file is in place counts as done (its rename was
the last step it needed), and nothing half-written is ever read: temporary files are removed at the next start.
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable import replace_synced, write_synced
from errors import InsufficientStorage
from jobs.webhook import event_body

TABLE_FILE = "jobs.sqlite3"
TMP_SUFFIX = ".tmp"
ACTIVE = ("queued", "running")
ENDED = ("done", "failed", "cancelled")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    state TEXT NOT NULL,
    format TEXT NOT NULL,
    options TEXT NOT NULL,
    chapters TEXT NOT NULL,
    sample_rate INTEGER NOT NULL,
    chars_total INTEGER NOT NULL,
    chars_done INTEGER NOT NULL DEFAULT 0,
    pieces_total INTEGER NOT NULL,
    pieces_done INTEGER NOT NULL DEFAULT 0,
    samples INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    foreseen_bytes INTEGER NOT NULL,
    node TEXT NOT NULL,
    webhook_url TEXT,
    webhook_secret TEXT NOT NULL DEFAULT '',
    error TEXT,
    created_at REAL NOT NULL,
    served_at REAL,
    ended_at REAL
);
CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs (key, created_at);
CREATE TABLE IF NOT EXISTS pieces (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    chapter INTEGER NOT NULL,
    text TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    samples INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS webhooks (
    job_id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    secret TEXT NOT NULL,
    body BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    due_at REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    last_status INTEGER,
    last_error TEXT,
    last_attempt_at REAL
);
"""
_WEBHOOK_STATE_COLUMNS = {
    "state": "TEXT NOT NULL DEFAULT 'pending'",
    "last_status": "INTEGER",
    "last_error": "TEXT",
    "last_attempt_at": "REAL",
}
"""Columns of the `webhooks` table added after its first release: a table made before them gets them at open."""


@dataclass(frozen=True)
class JobRecord:
    """One row of the job table."""

    id: str
    key: str
    state: str
    format: str
    options: dict[str, Any]
    """The speech options every piece is synthesized with (voice, language, caps, engine parameters)."""
    chapters: list[str]
    """Each chapter's title."""
    sample_rate: int
    chars_total: int
    chars_done: int
    pieces_total: int
    pieces_done: int
    samples: int
    bytes: int
    foreseen_bytes: int
    """Disk the job is expected to take once done: what bounds count for it until then."""
    node: str
    webhook_url: str | None
    webhook_secret: str
    error: str | None
    created_at: float
    served_at: float | None
    ended_at: float | None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def disk_bytes(self) -> int:
        """Disk the job takes, or will take once done (the larger)."""
        return self.bytes if self.ended else max(self.bytes, self.foreseen_bytes)


@dataclass(frozen=True)
class Piece:
    """One piece of a job: its place (`seq`, in order of the text), its chapter and its text."""

    seq: int
    chapter: int
    text: str
    done: bool = False
    samples: int = 0


@dataclass(frozen=True)
class Webhook:
    """A job's webhook call still to make (jobs.webhook): kept apart from the job's row, so that the call of a job
    cancelled and removed is still made."""

    job_id: str
    url: str
    secret: str
    body: bytes
    attempts: int
    """Calls made so far, all failed."""
    due_at: float
    """time.time() at which the next call is due."""


@dataclass(frozen=True)
class WebhookState:
    """Where a job's webhook call stands, as `GET /jobs/{id}` shows it: `pending` (the job has not ended, or a call
    is still to make), `delivered` (a call answered 2xx) or `failed` (every attempt failed: given up)."""

    state: str
    attempts: int
    last_status: int | None
    """The HTTP status of the last call (None before the first, or when the receiver never answered)."""
    last_error: str | None
    """What went wrong with the last call, when it failed."""
    last_attempt_at: float | None
    next_attempt_at: float | None
    """When the next call is due (None once delivered or given up, or while the job has not ended)."""


class JobStore:
    """The job table and the job folders under `root`. Used from the event loop's thread; file writes may run on a
    worker thread (`write_piece`, and the assembly's `write_file`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.db = sqlite3.connect(root / TABLE_FILE, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a commit that returned survives a power cut
        self.db.executescript(_SCHEMA)
        known = {row["name"] for row in self.db.execute("PRAGMA table_info(webhooks)")}
        for column, kind in _WEBHOOK_STATE_COLUMNS.items():
            if column not in known:
                self.db.execute(f"ALTER TABLE webhooks ADD COLUMN {column} {kind}")

    def close(self) -> None:
        self.db.close()

    # -- the table -------------------------------------------------------------------------------------------------

    def add(self, record: JobRecord, pieces: Iterable[Piece]) -> None:
        """A new job and its pieces, in one transaction."""
        row = _row(record)
        with self._transaction():
            self.db.execute(
                f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", [*row.values()]
            )
            self.db.executemany(
                "INSERT INTO pieces (job_id, seq, chapter, text) VALUES (?, ?, ?, ?)",
                [(record.id, p.seq, p.chapter, p.text) for p in pieces],
            )

    def get(self, job_id: str) -> JobRecord | None:
        row = self.db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _record(row) if row is not None else None

    def of_key(self, key: str, offset: int, limit: int) -> tuple[list[JobRecord], int]:
        """A page of the key's jobs, newest first, and how many it has in all."""
        rows = self.db.execute(
            "SELECT * FROM jobs WHERE key = ? ORDER BY created_at DESC, id LIMIT ? OFFSET ?", (key, limit, offset)
        ).fetchall()
        (total,) = self.db.execute("SELECT COUNT(*) FROM jobs WHERE key = ?", (key,)).fetchone()
        return [_record(row) for row in rows], int(total)

    def every(self) -> list[JobRecord]:
        return [_record(row) for row in self.db.execute("SELECT * FROM jobs ORDER BY created_at, id")]

    def next_job(self) -> JobRecord | None:
        """The active job served longest ago (one never served first, oldest first): jobs take turns, piece by
        piece."""
        row = self.db.execute(
            "SELECT * FROM jobs WHERE state IN ('queued', 'running') "
            "ORDER BY served_at IS NOT NULL, served_at, created_at, id LIMIT 1"
        ).fetchone()
        return _record(row) if row is not None else None

    def pieces(self, job_id: str) -> list[Piece]:
        rows = self.db.execute(
            "SELECT seq, chapter, text, done, samples FROM pieces WHERE job_id = ? ORDER BY seq", (job_id,)
        )
        return [Piece(row["seq"], row["chapter"], row["text"], bool(row["done"]), row["samples"]) for row in rows]

    def next_piece(self, job_id: str) -> Piece | None:
        row = self.db.execute(
            "SELECT seq, chapter, text FROM pieces WHERE job_id = ? AND done = 0 ORDER BY seq LIMIT 1", (job_id,)
        ).fetchone()
        return Piece(row["seq"], row["chapter"], row["text"]) if row is not None else None

    def chapter_progress(self, job_id: str) -> list[tuple[int, int, int]]:
        """(chapter, pieces left, samples made) of each chapter that has pieces, in order."""
        rows = self.db.execute(
            "SELECT chapter, COUNT(*) - SUM(done), SUM(samples) FROM pieces WHERE job_id = ? "
            "GROUP BY chapter ORDER BY chapter",
            (job_id,),
        )
        return [(int(chapter), int(left), int(samples)) for chapter, left, samples in rows]

    def counts(self) -> dict[str, int]:
        """Jobs by state."""
        return {state: int(n) for state, n in self.db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")}

    def set_state(self, job_id: str, state: str, error: str | None = None) -> None:
        """The job's new state; one that ends it queues its webhook call in the same transaction."""
        ended = time.time() if state in ENDED else None
        with self._transaction():
            self.db.execute(
                "UPDATE jobs SET state = ?, error = ?, ended_at = ? WHERE id = ?", (state, error, ended, job_id)
            )
            if ended is not None:
                self._queue_webhook(job_id)

    def served(self, job_id: str) -> None:
        """The job took its turn: another active job goes next."""
        self.db.execute("UPDATE jobs SET served_at = ? WHERE id = ?", (time.time(), job_id))

    def piece_done(self, job_id: str, piece: Piece, samples: int) -> None:
        """The piece's file is in place: counted, in one transaction."""
        with self._transaction():
            updated = self.db.execute(
                "UPDATE pieces SET done = 1, samples = ? WHERE job_id = ? AND seq = ? AND done = 0",
                (samples, job_id, piece.seq),
            ).rowcount
            if updated:
                self.db.execute(
                    "UPDATE jobs SET pieces_done = pieces_done + 1, chars_done = chars_done + ?, "
                    "samples = samples + ?, bytes = bytes + ? WHERE id = ?",
                    (len(piece.text), samples, 2 * samples, job_id),
                )

    def finished(self, job_id: str, file_bytes: int) -> None:
        """The job's file is in place: done (its webhook call queued in the same transaction)."""
        with self._transaction():
            self.db.execute(
                "UPDATE jobs SET state = 'done', bytes = ?, ended_at = ? WHERE id = ?",
                (file_bytes, time.time(), job_id),
            )
            self._queue_webhook(job_id)

    def _queue_webhook(self, job_id: str) -> None:
        record = self.get(job_id)
        if record is None or not record.webhook_url:
            return
        body = event_body(record.id, record.state, record.node, record.error)
        self.db.execute(
            "INSERT OR REPLACE INTO webhooks (job_id, url, secret, body, attempts, due_at) VALUES (?, ?, ?, ?, 0, ?)",
            (job_id, record.webhook_url, record.webhook_secret, body, time.time()),
        )

    def webhooks(self) -> list[Webhook]:
        """The webhook calls still to make, soonest due first."""
        rows = self.db.execute(
            "SELECT job_id, url, secret, body, attempts, due_at FROM webhooks WHERE state = 'pending' "
            "ORDER BY due_at, job_id"
        )
        return [Webhook(**dict(row)) for row in rows]

    def webhook_failed(self, job_id: str, attempts: int, due_at: float, status: int | None, problem: str) -> None:
        """A call failed: `attempts` made so far, the next due at `due_at`."""
        self.db.execute(
            "UPDATE webhooks SET attempts = ?, due_at = ?, last_status = ?, last_error = ?, last_attempt_at = ? "
            "WHERE job_id = ?",
            (attempts, due_at, status, problem, time.time(), job_id),
        )

    def webhook_over(self, job_id: str, state: str, attempts: int, status: int | None, problem: str | None) -> None:
        """The call was `delivered`, or given up (`failed`): no more of it. Its outcome stays beside the job for its
        status; a job already removed (a cancelled one's call is still made) keeps nothing."""
        with self._transaction():
            self.db.execute(
                "UPDATE webhooks SET state = ?, attempts = ?, last_status = ?, last_error = ?, last_attempt_at = ? "
                "WHERE job_id = ?",
                (state, attempts, status, problem, time.time(), job_id),
            )
            self.db.execute(
                "DELETE FROM webhooks WHERE job_id = ? AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = ?)",
                (job_id, job_id),
            )

    def webhook_state(self, job_id: str) -> WebhookState | None:
        """Where the job's call stands; None when the job has no webhook or its call is not queued yet."""
        row = self.db.execute(
            "SELECT state, attempts, last_status, last_error, last_attempt_at, due_at FROM webhooks WHERE job_id = ?",
            (job_id,),
        ).fetchone()
        if row is None:
            return None
        values = dict(row)
        due_at = values.pop("due_at")
        return WebhookState(**values, next_attempt_at=due_at if values["state"] == "pending" else None)

    def delete(self, job_id: str) -> None:
        """The job's row and pieces gone (and its webhook's outcome: a call still to make is made), then its folder
        (a folder left by a crash is removed at the next start)."""
        with self._transaction():
            self.db.execute("DELETE FROM pieces WHERE job_id = ?", (job_id,))
            self.db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            self.db.execute("DELETE FROM webhooks WHERE job_id = ? AND state != 'pending'", (job_id,))
        shutil.rmtree(self.folder(job_id), ignore_errors=True)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        # One connection serves the event loop and worker threads (a job's removal, a piece's store): a transaction
        # begun by one while another's is open would fail ("cannot start a transaction within a transaction").
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    # -- the files -------------------------------------------------------------------------------------------------

    def folder(self, job_id: str) -> Path:
        return self.root / job_id

    def piece_path(self, job_id: str, seq: int) -> Path:
        return self.folder(job_id) / f"{seq:06d}.pcm"

    def audio_path(self, record: JobRecord) -> Path:
        return self.folder(record.id) / f"audio.{record.format}"

    def write_piece(self, job_id: str, seq: int, pcm: bytes) -> None:
        """The piece's PCM, in place atomically (a 507 with nothing left behind when the disk is full)."""
        write_atomically(self.piece_path(job_id, seq), [pcm])

    def read_piece(self, job_id: str, seq: int) -> bytes:
        return self.piece_path(job_id, seq).read_bytes()

    def recover(self) -> list[str]:
        """After a restart: running jobs queued again, pieces whose files are in place counted as done, temporary
        files and folders of jobs the table lost removed. Returns the ids of the jobs that go on."""
        known = {record.id for record in self.every()}
        for path in self.root.iterdir():
            if path.is_dir() and path.name not in known:
                shutil.rmtree(path, ignore_errors=True)
            elif path.is_dir():
                for leftover in path.glob(f"*{TMP_SUFFIX}"):
                    leftover.unlink(missing_ok=True)
        resumed = []
        for record in self.every():
            if record.ended:
                continue
            for piece in self.pieces(record.id):
                path = self.piece_path(record.id, piece.seq)
                if not piece.done and path.exists():
                    self.piece_done(record.id, piece, path.stat().st_size // 2)
            self.set_state(record.id, "queued")
            resumed.append(record.id)
        return resumed


def write_atomically(path: Path, parts: Iterable[bytes]) -> int:
    """Write `parts` to a temporary file beside `path`, flush it to disk, rename it onto `path` and make the rename
    durable; returns the bytes written. A full disk is a 507 with nothing left behind."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        written = write_synced(tmp, parts)
        replace_synced(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            raise InsufficientStorage(
                f"no space left on the jobs volume for {path.name}; nothing was stored", code="insufficient_storage"
            ) from None
        raise
    return written


_JSON_FIELDS = ("options", "chapters")


def _row(record: JobRecord) -> dict[str, Any]:
    row = dict(record.__dict__)
    for name in _JSON_FIELDS:
        row[name] = json.dumps(row[name])
    return row


def _record(row: sqlite3.Row) -> JobRecord:
    values = dict(row)
    for name in _JSON_FIELDS:
        values[name] = json.loads(values[name])
    return JobRecord(**values)
