"""The jobs of this node: taken after full validation, bounded, synthesized piece by piece in the background and
resumed after a restart from their last finished piece.

Each piece is one speech request through the lifecycle (`SynthesisService.speak`: the same planning, voices and
engine parameters as any request), in the fair queue's background class: its steps run only when no interactive
request needs the GPU thread. One piece is under way at a time, node-wide; active jobs take turns piece by piece.
A drain stops at a piece boundary: the piece under way is an ordinary request the drain waits for, and no other
starts; once it is stored, the node's running jobs are queued again in the table (the next start goes on with them).
Every state change is one log line with the job's id. A job's webhook call is queued in the table as it ends and made
by a task of its own (`_call_webhooks`), durably retried with backoff across restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from errors import Conflict, InvalidInput, NotFound, ServiceError, Unavailable
from jobs import bounds, webhook
from jobs.assembly import encode
from jobs.pieces import JobSpec, PieceRequest, cut
from jobs.store import ENDED, JobRecord, JobStore, Piece, Webhook, WebhookState, write_atomically
from lifecycle.request_context import RequestContext
from lifecycle.synthesis import SynthesisService
from settings import Settings

log = logging.getLogger("polytts.jobs")
SPEED_SMOOTHING = 0.3
"""Weight of the newest piece in the measured speed (characters per second of the job work)."""
KEEPALIVE_S = 15.0
"""A progress event stream with nothing new says it is alive this often."""
RETENTION_SWEEP_S = 60.0
WARMING_POLL_S = 0.5


class JobRunner:
    """This node's jobs: their table and files (`JobStore`, opened by `start`), the one task that synthesizes their
    pieces, the sweep that removes ended jobs after their retention, and the webhooks under way."""

    def __init__(self, settings: Settings, synthesis: SynthesisService) -> None:
        self.settings = settings
        self.synthesis = synthesis
        self.node = settings.host_id
        self._store: JobStore | None = None
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._webhooks: dict[str, asyncio.Task[None]] = {}
        """The webhook calls under way, by job id."""
        self._webhooks_changed = asyncio.Event()
        self._current: tuple[str, asyncio.Task[bytes]] | None = None
        self._storing: asyncio.Task[None] | None = None
        """The piece made being stored: a stop waits for it, so a piece made is never made again."""
        self.chars_per_s: float | None = None
        """Characters of job text synthesized per second of job work, as measured (None until a piece ends)."""

    @property
    def store(self) -> JobStore:
        assert self._store is not None, "the job runner has not started"
        return self._store

    # -- the lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the table, resume the jobs a stop or a crash interrupted, and start working."""
        self._store = await asyncio.to_thread(JobStore, self.settings.jobs_dir)
        for job_id in await asyncio.to_thread(self.store.recover):
            log.info("job %s queued again after a restart", job_id)
        for hook in await asyncio.to_thread(self.store.webhooks):
            log.info("job %s webhook resumed after %d failed attempt(s)", hook.job_id, hook.attempts)
        self._tasks = [
            asyncio.create_task(self._work()),
            asyncio.create_task(self._sweep()),
            asyncio.create_task(self._call_webhooks()),
        ]

    async def stop(self) -> None:
        """Stop at a piece boundary: a piece being stored is stored, one being made is cut (made again at the next
        start); running jobs are queued again. Webhook calls under way are cut and made again at the next start."""
        if self._storing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._storing)
        tasks = [*self._tasks, *self._webhooks.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._store is None:
            return
        for job in self.store.every():
            if job.state == "running":
                self.store.set_state(job.id, "queued")
                log.info(
                    "job %s queued: the node stopped with %d of %d pieces stored; the next start goes on from there",
                    job.id,
                    job.pieces_done,
                    job.pieces_total,
                )
        self._store.close()

    # -- the API ---------------------------------------------------------------------------------------------------

    async def submit(self, spec: JobSpec, key: str, webhook_secret: str) -> JobRecord:
        """Validate the job as its requests would be validated (every piece planned), check its bounds, and queue
        it; raises the ServiceError a client should see."""
        self.synthesis.check_open()
        settings = self.settings
        bounds.check_size(settings, spec.chars, len(spec.chapters))
        pieces = cut(spec.chapters, min(settings.job_piece_chars, settings.max_text_chars))
        empty = sorted(set(range(len(spec.chapters))) - {piece.chapter for piece in pieces})
        if empty:
            raise InvalidInput(
                f"chapter {empty[0]} holds nothing to speak; every chapter needs text", code="empty_text"
            )
        options = spec.options()
        sample_rate = 0
        for piece in pieces:
            plan = await self.synthesis.planner.plan(PieceRequest.of(options, piece.text))
            sample_rate = plan.engine.sample_rate
            await asyncio.sleep(0)  # a book takes seconds to plan: other requests are served in between
        disk = bounds.foreseen_bytes(spec.chars, sample_rate)
        bounds.check_room(settings, key, spec.chars, disk, self.store.every(), settings.retry_after_seconds)
        record = JobRecord(
            id=uuid.uuid4().hex,
            key=key,
            state="queued",
            format=spec.format,
            options=options,
            chapters=[title for title, _ in spec.chapters],
            sample_rate=sample_rate,
            chars_total=sum(len(piece.text) for piece in pieces),
            chars_done=0,
            pieces_total=len(pieces),
            pieces_done=0,
            samples=0,
            bytes=0,
            foreseen_bytes=disk,
            node=self.node,
            webhook_url=spec.webhook_url,
            webhook_secret=webhook_secret,
            error=None,
            created_at=time.time(),
            served_at=None,
            ended_at=None,
        )
        self.store.add(record, pieces)
        log.info(
            "job %s queued: key=%s chars=%d chapters=%d pieces=%d format=%s",
            record.id,
            key,
            record.chars_total,
            len(spec.chapters),
            len(pieces),
            spec.format,
        )
        self._notify()
        return record

    def owned(self, job_id: str, key: str) -> JobRecord:
        """The key's job of that id; another key's is as unknown as a job that never was (404)."""
        record = self.store.get(job_id)
        if record is None or record.key != key:
            raise NotFound(f"no job {job_id[:40]!r} of this key on this node", code="job_not_found")
        return record

    def status(self, record: JobRecord) -> dict[str, Any]:
        """What `GET /jobs/{id}` says of a job."""
        chapters = self.store.chapter_progress(record.id)
        left = record.chars_total - record.chars_done
        active = len([job for job in self.store.every() if not job.ended]) or 1
        eta = left * active / self.chars_per_s if self.chars_per_s and not record.ended else None
        return {
            "job_id": record.id,
            "state": record.state,
            "node": record.node,
            "format": record.format,
            "chars_total": record.chars_total,
            "chars_done": record.chars_done,
            "chapters_total": len(record.chapters),
            "chapters_done": sum(1 for _, pieces_left, _ in chapters if not pieces_left),
            "pieces_total": record.pieces_total,
            "pieces_done": record.pieces_done,
            "audio_seconds": round(record.samples / record.sample_rate, 3) if record.sample_rate else 0.0,
            "eta_s": round(eta, 1) if eta is not None else (0.0 if record.state == "done" else None),
            "chapters": [
                {
                    "index": chapter,
                    "title": record.chapters[chapter],
                    "done": not pieces_left,
                    "audio_seconds": round(samples / record.sample_rate, 3) if record.sample_rate else 0.0,
                }
                for chapter, pieces_left, samples in chapters
            ],
            "error": record.error,
            "created_at": record.created_at,
            "ended_at": record.ended_at,
            "webhook": self._webhook_status(record),
        }

    def _webhook_status(self, record: JobRecord) -> dict[str, Any] | None:
        """Where the job's webhook call stands (None without a webhook); pending with no attempt until it ends."""
        if not record.webhook_url:
            return None
        state = self.store.webhook_state(record.id) or WebhookState("pending", 0, None, None, None, None)
        return dataclasses.asdict(state)

    def page(self, key: str, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        records, total = self.store.of_key(key, offset, limit)
        return [self.status(record) for record in records], total

    async def delete(self, job_id: str, key: str) -> None:
        """Cancel the job (its piece under way is dropped before its next step), then remove it and its files."""
        record = self.owned(job_id, key)
        if not record.ended:
            if self._current is not None and self._current[0] == job_id:
                self._current[1].cancel()
            self._end(record, "cancelled", None)
        await asyncio.to_thread(self.store.delete, job_id)
        log.info("job %s deleted", job_id)
        self._notify()

    async def events(self, job_id: str, key: str) -> AsyncIterator[dict[str, Any] | None]:
        """The job's status each time it changes, until it ends (or is deleted); None now and then when nothing
        changed (a keep-alive)."""
        last: dict[str, Any] | None = None
        while True:
            changed = self._changed
            try:
                status = self.status(self.owned(job_id, key))
            except NotFound:
                return
            if status != last:
                yield status
                last = status
            if status["state"] in ENDED:
                return
            try:
                async with asyncio.timeout(KEEPALIVE_S):  # not wait_for: on 3.11 it can swallow a cancel
                    await changed.wait()
            except TimeoutError:
                yield None

    def audio(self, record: JobRecord) -> tuple[str, int]:
        """The finished file's path and size; a 409 `job_not_done` before it is done."""
        if record.state != "done":
            raise _not_done(record)
        path = self.store.audio_path(record)
        return str(path), path.stat().st_size

    async def chapter_audio(self, record: JobRecord, chapter: int) -> bytes:
        """One chapter's audio in the job's format (a 404 `chapter_not_found` for an index it does not have)."""
        if record.state != "done":
            raise _not_done(record)
        if not 0 <= chapter < len(record.chapters):
            raise NotFound(
                f"the job has chapters 0 to {len(record.chapters) - 1}, not {chapter}", code="chapter_not_found"
            )
        pieces = [piece for piece in self.store.pieces(record.id) if piece.chapter == chapter]
        spans = [(record.chapters[chapter], 0, sum(piece.samples for piece in pieces))]

        def made() -> bytes:
            read = lambda seq: self.store.read_piece(record.id, seq)  # noqa: E731
            return b"".join(encode(record.format, record.sample_rate, [p.seq for p in pieces], read, spans))

        return await asyncio.to_thread(made)

    def stats(self) -> dict[str, Any]:
        """Jobs by state, the measured speed, and the queue's depth (active jobs, characters still to make)."""
        if self._store is None:
            return {"by_state": {}, "chars_per_s": None, "active": 0, "chars_waiting": 0}
        active = [job for job in self.store.every() if not job.ended]
        return {
            "by_state": self.store.counts(),
            "chars_per_s": self.chars_per_s,
            "active": len(active),
            "chars_waiting": sum(job.chars_total - job.chars_done for job in active),
        }

    def job_ids(self) -> list[str]:
        return [job.id for job in self.store.every()] if self._store is not None else []

    # -- the work --------------------------------------------------------------------------------------------------

    def _notify(self) -> None:
        """Something changed: the worker looks again, and progress streams send the new status."""
        self._wake.set()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _work(self) -> None:
        while True:
            job = None if self.synthesis.draining else self.store.next_job()
            if job is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._advance(job)
            except Exception:  # a job's failure of our own: the job fails, the runner goes on
                log.exception("job %s failed", job.id)
                self._end(job, "failed", "an internal error; the node's log has its traceback")

    async def _advance(self, job: JobRecord) -> None:
        """One turn of the job: its next piece, or its finished file once every piece is done."""
        if self.synthesis.pool.status()[0] == "warming":  # after a start: the default engine loads first
            await asyncio.sleep(WARMING_POLL_S)
            return
        piece = self.store.next_piece(job.id)
        if piece is None:
            await self._assemble(job)
            return
        if job.state == "queued":
            self.store.set_state(job.id, "running")
            log.info("job %s running (piece %d of %d)", job.id, piece.seq + 1, job.pieces_total)
        self.store.served(job.id)
        began = time.perf_counter()
        task = asyncio.create_task(self._synthesize(job, piece))
        self._current = (job.id, task)
        try:
            await asyncio.wait({task})
        finally:
            self._current = None
            task.cancel()  # the worker itself stopped: so does its piece
        if task.cancelled():  # the job was cancelled meanwhile
            return
        error = task.exception()
        if isinstance(error, Unavailable):  # draining (the loop waits), or the engine loading or failed: later
            if not self.synthesis.draining:
                await asyncio.sleep(self.settings.retry_after_seconds)
            return
        if isinstance(error, ServiceError):
            self._end(job, "failed", f"{error.code}: {error.message}")
            return
        if error is not None:
            raise error
        self._storing = asyncio.create_task(self._store_piece(job, piece, task.result(), began))
        try:
            await asyncio.shield(self._storing)
        finally:
            self._storing = None

    async def _store_piece(self, job: JobRecord, piece: Piece, pcm: bytes, began: float) -> None:
        await asyncio.to_thread(self.store.write_piece, job.id, piece.seq, pcm)
        if self.store.get(job.id) is None:  # deleted while its piece was written
            await asyncio.to_thread(self.store.delete, job.id)
            return
        self.store.piece_done(job.id, piece, len(pcm) // 2)
        log.info("job %s piece %d stored (%d of %d)", job.id, piece.seq, job.pieces_done + 1, job.pieces_total)
        speed = len(piece.text) / max(time.perf_counter() - began, 1e-6)
        previous = self.chars_per_s
        self.chars_per_s = speed if previous is None else previous + SPEED_SMOOTHING * (speed - previous)
        self._notify()

    async def _synthesize(self, job: JobRecord, piece: Piece) -> bytes:
        """The piece's PCM, through the lifecycle as a background request of the job's key."""
        ctx = RequestContext(
            route="jobs", principal=job.key, background=True, request_id=f"job-{job.id[:12]}-{piece.seq}"
        )
        speech = await self.synthesis.speak(PieceRequest.of(job.options, piece.text), ctx)
        return await speech.read("pcm")

    async def _assemble(self, job: JobRecord) -> None:
        pieces = self.store.pieces(job.id)
        spans, start = [], 0
        for chapter, title in enumerate(job.chapters):
            length = sum(piece.samples for piece in pieces if piece.chapter == chapter)
            spans.append((title, start, start + length))
            start += length

        def write() -> int:
            read = lambda seq: self.store.read_piece(job.id, seq)  # noqa: E731
            parts = encode(job.format, job.sample_rate, [p.seq for p in pieces], read, spans)
            return write_atomically(self.store.audio_path(job), parts)

        size = await asyncio.to_thread(write)
        pieces_bytes = sum(2 * piece.samples for piece in pieces)
        self.store.finished(job.id, size + pieces_bytes)
        self._ended(self.store.get(job.id) or job, "done")

    def _end(self, job: JobRecord, state: str, error: str | None) -> None:
        self.store.set_state(job.id, state, error)
        self._ended(self.store.get(job.id) or job, state, error)

    def _ended(self, job: JobRecord, state: str, error: str | None = None) -> None:
        """The job ended: its line, the progress streams told, its webhook call (queued with its end) made."""
        log.info("job %s %s%s", job.id, state, f": {error}" if error else "")
        self._notify()
        self._webhooks_changed.set()

    async def _call_webhooks(self) -> None:
        """Forever: start each webhook call the table has due, each on a task of its own (a slow receiver delays
        no other), then wait for the next to be due or a new one to be queued."""
        while True:
            self._webhooks_changed.clear()
            now = time.time()
            pending = self.store.webhooks()
            for hook in pending:
                if hook.due_at <= now and hook.job_id not in self._webhooks:
                    self._webhooks[hook.job_id] = asyncio.create_task(self._call_webhook(hook))
            later = [hook.due_at - now for hook in pending if hook.due_at > now]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(later) if later else None):
                    await self._webhooks_changed.wait()

    async def _call_webhook(self, hook: Webhook) -> None:
        """One call of a job's webhook; its outcome in the table (delivered, given up, or when to call again)."""
        try:
            self._record_call(hook, await webhook.attempt(hook.url, hook.secret, hook.body))
        finally:
            self._webhooks.pop(hook.job_id, None)
            self._webhooks_changed.set()

    def _record_call(self, hook: Webhook, answer: webhook.Answer) -> None:
        attempts, most = hook.attempts + 1, self.settings.job_webhook_attempts
        if answer.problem is None:
            self.store.webhook_over(hook.job_id, "delivered", attempts, answer.status, None)
            log.info("job %s webhook delivered (attempt %d/%d)", hook.job_id, attempts, most)
            return
        if attempts >= most:
            self.store.webhook_over(hook.job_id, "failed", attempts, answer.status, answer.problem)
        else:
            wait = webhook.backoff_s(attempts, self.settings.job_webhook_first_wait_s)
            self.store.webhook_failed(hook.job_id, attempts, time.time() + wait, answer.status, answer.problem)
        log.warning("job %s webhook attempt %d/%d failed: %s", hook.job_id, attempts, most, answer.problem)
        if attempts >= most:
            log.warning("job %s webhook given up after %d attempts", hook.job_id, attempts)

    async def _sweep(self) -> None:
        """Forever: remove ended jobs older than their retention."""
        while True:
            cutoff = time.time() - self.settings.job_retention_s
            for job in self.store.every():
                if job.ended and job.ended_at is not None and job.ended_at < cutoff:
                    await asyncio.to_thread(self.store.delete, job.id)
                    log.info("job %s removed: it ended more than POLYTTS_JOB_RETENTION_S ago", job.id)
                    self._notify()
            await asyncio.sleep(min(RETENTION_SWEEP_S, self.settings.job_retention_s / 4))


def _not_done(record: JobRecord) -> ServiceError:
    return Conflict(f"job {record.id} is {record.state}: its audio is ready once it is done", code="job_not_done")
