"""The one request lifecycle every speech route uses: plan, cache, admit, submit, stream, store, log.

A route parses its request, calls `SynthesisService.speak` (or `speak_live`, for text that arrives while it is
written), and wraps the `Speech` it gets in a response. Everything a client can get wrong is raised by `speak`, before
the first byte; every request, served or refused, ends in one log line with its timings and one count in
`polytts_requests_total` with its outcome.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Iterator

from audio.encoding import to_pcm16
from audio.word_timings import ChunkWords, Words, decode_chunk_words, encode_chunk_words
from cache import MemoryCache, words_key
from errors import ServiceError, Unavailable
from gpu.engine_pool import EnginePool
from gpu.jobs import CLIENT_GONE, Job
from gpu.scheduler import Scheduler
from lexicons.store import LexiconStore
from lifecycle.catalog import VoiceCatalog
from lifecycle.chunk_sources import ChunkSource, PlannedChunks
from lifecycle.metrics import Metrics
from lifecycle.plan import Plan, Planner
from lifecycle.request_context import REQUEST_ID, RequestContext
from lifecycle.requests import SpeechRequest, VoiceRequest
from lifecycle.speech import Speech
from lifecycle.timings import Timings
from lifecycle.voicing import ChunkAudio, Voicing
from pcm_cache import PcmCache
from settings import Settings
from text.live_text import LiveText

log = logging.getLogger("polytts.synthesis")
CACHE_SLICE = 32 * 1024
"""A cached answer is sent in slices of this many bytes, as a generated one is sent in pieces."""


class SynthesisService:
    """Serves speech requests from plan to log line: the caches, admission and the job's steps on the GPU thread,
    the stream of audio, and the one line and count each request ends with."""

    def __init__(
        self,
        *,
        settings: Settings,
        pool: EnginePool,
        catalog: VoiceCatalog,
        scheduler: Scheduler,
        memory_cache: MemoryCache,
        pcm_cache: PcmCache,
        metrics: Metrics,
        lexicons: LexiconStore | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.planner = Planner(settings, pool, catalog, lexicons)
        self.scheduler = scheduler
        self.memory_cache = memory_cache
        self.pcm_cache = pcm_cache
        self.metrics = metrics
        self.in_flight = 0
        """Requests admitted (or served from a cache) and not ended yet: what a drain waits for."""
        self.draining = False
        """Set on SIGTERM: new syntheses are refused (503 `draining`) while those under way finish."""

    # -- the lifecycle ---------------------------------------------------------------------------------------------

    def check_open(self) -> None:
        """Unavailable (503 `draining`) once the node drains: new syntheses go to another node."""
        if self.draining:
            raise Unavailable("this node is draining before a restart; retry on another node", code="draining")

    async def speak(self, request: SpeechRequest, ctx: RequestContext, timed: bool = False) -> Speech:
        """Plan the request, then serve it from the caches or admit it and wait for its first audio.

        Raises the ServiceError a client should see (404, 413, 422, 429, 503, ...), logged and counted as the
        request's outcome.
        """
        timings = Timings(ctx.route, ctx.request_id)
        try:
            self.check_open()
            plan = timings.plan = await self.planner.plan(request, ctx.engine, timed, ctx.principal)
            cached = None if ctx.background else await self.cached_audio(plan)
            if cached is not None:
                timings.cache = "hit"
                speech = Speech(plan, timings, ctx, self._cached_stream(timings, *cached))
            else:
                job = self.submit(plan, ctx, PlannedChunks(plan.chunks, self.settings.short_step_word_cuts))
                speech = Speech(plan, timings, ctx, self._generated(plan, job, timings), job)
            timings.in_flight = True
            self.in_flight += 1
            await speech.start()
            return speech
        except ServiceError as exc:
            self.finish(timings, exc.code)
            raise

    async def speak_live(
        self,
        request: VoiceRequest,
        ctx: RequestContext,
        timed: bool | None,
        phrase_chars: tuple[int, int] | None = None,
        ssml: bool | None = None,
    ) -> tuple[Speech, LiveText]:
        """Admit a live request: its voice planned now, its phrases spoken as its text (the LiveText returned) gets
        them (`phrase_chars` and `ssml`: as `Planner.live_text` has them); never cached."""
        timings = Timings(ctx.route, ctx.request_id)
        try:
            self.check_open()
            plan = await self.planner.plan_voice(request, ctx.engine, timed, ctx.principal)
            job: Job | None = None  # the wake below runs once a phrase has come: the job is submitted by then
            text = self.planner.live_text(plan, lambda: self.scheduler.arrived(job), phrase_chars, ssml)
            plan = timings.plan = dataclasses.replace(plan, chunks=text.taken)
            job = self.submit(plan, ctx, text)
            speech = Speech(plan, timings, ctx, self._generated(plan, job, timings), job)
            timings.in_flight = True
            self.in_flight += 1
            return speech, text
        except ServiceError as exc:
            self.finish(timings, exc.code)
            raise

    def rejected(self, route: str, error: ServiceError, client: str | None = None) -> None:
        """A request refused before it could be planned (its key, its fairness key or its body was refused, or its
        handshake came to a draining node): one line, with who asked and the request's id, and its count, as every
        request has."""
        request_id = REQUEST_ID.get() or "-"
        log.info("%s outcome=%s status=%d client=%s id=%s", route, error.code, error.status, client or "-", request_id)
        self.metrics.requests.labels("none", route, error.code).inc()

    def finish(self, timings: Timings, outcome: str) -> None:
        """A request ended: its one log line, and its metrics (once, however many paths reach here)."""
        if timings.ended is not None:
            return
        timings.ended = time.perf_counter()
        timings.outcome = outcome
        if timings.in_flight:
            self.in_flight -= 1
        log.info("%s", timings.log_line())
        engine = timings.plan.engine.name if timings.plan else "none"
        self.metrics.requests.labels(engine, timings.route, outcome).inc()
        if outcome == "ok":
            if (ttfa := timings.time_to_first_audio) is not None:
                self.metrics.time_to_first_audio.labels(engine).observe(ttfa)
            if (rtf := timings.real_time_factor) is not None:
                self.metrics.real_time_factor.labels(engine).observe(rtf)

    # -- caches ----------------------------------------------------------------------------------------------------

    async def cached_pcm(self, plan: Plan) -> bytes | None:
        """The finished audio of an identical earlier request: from memory, else from disk (off the event loop)."""
        cached = await self.cached_audio(dataclasses.replace(plan, timed=False))
        return cached[0] if cached is not None else None

    async def cached_audio(self, plan: Plan) -> tuple[bytes, ChunkWords | None] | None:
        """The finished audio of an identical earlier request and, for a request with word timings, the timings
        stored beside it (a hit only with both, each checked as its cache checks it, and the timings against the
        audio): from memory, else from disk (off the event loop)."""
        if plan.cache_key is None:
            return None
        found: tuple[bytes, ChunkWords | None] | None = None
        pcm = await self._cached(plan.cache_key)
        if pcm is not None and not plan.timed:
            found = pcm, None
        elif pcm is not None and (stored := await self._cached(words_key(plan.cache_key))) is not None:
            words = decode_chunk_words(stored, len(pcm))
            found = (pcm, words) if words is not None else None
        self.metrics.cache.labels("hit" if found is not None else "miss").inc()
        return found

    async def _cached(self, key: str) -> bytes | None:
        entry = self.memory_cache.get(key)
        if entry is None:
            entry = await asyncio.to_thread(self.pcm_cache.get, key)
            if entry is not None:
                self.memory_cache.put(key, entry)
        return entry

    async def store(self, plan: Plan, pcm: bytes, words: ChunkWords | None = None) -> None:
        """Cache a finished synthesis's audio and, where it timed its words, the timings beside it."""
        if not pcm or plan.cache_key is None:
            return
        entries = [(plan.cache_key, pcm)]
        if words:
            entries.append((words_key(plan.cache_key), encode_chunk_words(words)))
        for key, entry in entries:
            self.memory_cache.put(key, entry)
            try:
                await asyncio.to_thread(self.pcm_cache.put, key, entry)
            except OSError as exc:  # the request is served all the same; one line says why the entry is missing
                log.warning("%s", exc)

    async def _cached_stream(
        self, timings: Timings, pcm: bytes, words: ChunkWords | None
    ) -> AsyncGenerator[bytes | Words, None]:
        """A cached answer in slices, each chunk's word timings after its audio where they were asked for."""
        outcome = "cancelled"
        try:
            start = 0
            chunks: list[tuple[int, Words | None]] = [*words] if words else [(len(pcm), None)]
            for end, chunk_words in chunks:
                for first in range(start, end, CACHE_SLICE):
                    piece = pcm[first : min(first + CACHE_SLICE, end)]
                    if timings.first_audio is None:
                        timings.first_audio = time.perf_counter()
                    timings.audio_bytes += len(piece)
                    yield piece
                if chunk_words is not None:
                    yield chunk_words
                start = end
            outcome = "ok"
        finally:
            self.finish(timings, outcome)

    # -- generation ------------------------------------------------------------------------------------------------

    def submit(self, plan: Plan, ctx: RequestContext, chunks: ChunkSource) -> Job:
        """Admit the synthesis (or raise Busy); its steps, one chunk each as `chunks` gives them, run on the GPU
        thread, interleaved fairly with other requests' steps."""
        engine = plan.engine
        manager = self.pool.manager

        def steps() -> Iterator[ChunkAudio]:
            voice = Voicing(engine, plan.options, plan.timed)
            try:
                # A step stopped before its audio (an arrival went first) gives its chunk back: taken here again.
                while (taken := chunks.take()) is not None:
                    chunk, last = taken
                    # Another request may have switched engines between two steps: load again if so.
                    self.pool.ensure(engine.name)
                    # Cached by the engine after the first time; a chunk may name another voice (SSML `<voice>`).
                    handle = engine.prepare_voice(plan.voices.get(chunk.voice or "", plan.voice))
                    yield voice.chunk(chunk, handle, last)
                    manager.touch(engine.name)
            finally:
                engine.release()

        timeout = 0.0 if ctx.background else self.settings.request_timeout_s
        job = Job(
            engine=engine.name,
            chars=len(plan.text),
            steps=steps,
            loop=asyncio.get_running_loop(),
            key=ctx.principal,
            deadline=time.monotonic() + timeout if timeout else None,
            streaming=ctx.streaming,
            sample_rate=engine.sample_rate,
            unit_chars=chunks.unit_chars,
            client=ctx.client,
            background=ctx.background,
            ready=chunks.ready,
            give_back=chunks.give_back,
            # Live phrases are cut as the text arrives; a planned text's chunks may be cut short again.
            shorten=chunks.shorten if isinstance(chunks, PlannedChunks) else None,
            cuts=chunks.cut_steps if isinstance(chunks, PlannedChunks) else None,
            close_connection=ctx.close_connection,
        )
        return self.scheduler.submit(job)

    async def _generated(self, plan: Plan, job: Job, timings: Timings) -> AsyncGenerator[bytes | Words, None]:
        """s16le PCM pieces (and word timings) as the GPU thread produces them; the audio is cached whole only when
        the synthesis completed (under its request's key, even where the scheduler cut a step short: the same
        request must find it)."""
        pieces: list[bytes] = []
        words: ChunkWords = []
        produced = 0
        outcome = "cancelled"
        try:
            async for samples in job.pieces():
                if isinstance(samples, Words):
                    words.append((produced, samples))
                    yield samples
                    continue
                pcm = to_pcm16(samples)
                if timings.first_audio is None:
                    timings.first_audio = time.perf_counter()
                pieces.append(pcm)
                produced += len(pcm)
                timings.audio_bytes += len(pcm)
                yield pcm
            outcome = "ok"
            if not job.background:
                await self.store(plan, b"".join(pieces), words if plan.timed else None)
        except ServiceError as exc:
            outcome = "cancelled" if job.cancel_reason == CLIENT_GONE else exc.code
            self._log_failure(plan, timings, exc)
            raise
        except Exception as exc:
            outcome = "failed"
            self._log_failure(plan, timings, exc)
            raise
        finally:
            if outcome == "cancelled" and job.cancel_error is not None:  # dropped for a reason of its own
                outcome = job.cancel_error.code
            job.cancel()
            if job.started_at is not None:
                timings.queue_wait = job.started_at - job.submitted_at
            timings.synthesis = job.gpu_seconds
            timings.spoken_chars = job.spoken_chars
            if job.streaming:
                timings.underrun = job.underrun_s
            self.finish(timings, outcome)

    @staticmethod
    def _log_failure(plan: Plan, timings: Timings, exc: Exception) -> None:
        if isinstance(exc, ServiceError) and exc.status < 500:  # the client's doing: its outcome line says it all
            log.info("synthesis ended early (engine=%s voice=%s): %s", plan.engine.name, plan.voice_key, exc)
        elif timings.first_audio is None:  # still answerable with an error status
            log.warning("synthesis failed before any audio (engine=%s): %s", plan.engine.name, exc)
        elif isinstance(exc, ServiceError):  # dropped or refused by the service itself: no traceback to show
            log.warning("synthesis ended mid-stream (engine=%s voice=%s): %s", plan.engine.name, plan.voice_key, exc)
        else:
            log.exception("synthesis failed mid-stream (engine=%s voice=%s)", plan.engine.name, plan.voice_key)
