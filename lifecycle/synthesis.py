"""The one request lifecycle every speech route uses: resolve, plan, cache, admit, submit, stream, encode, time,
store, log.

A route parses its request, calls `SynthesisService.speak`, and wraps the `Speech` it gets in a response. Everything
a client can get wrong is raised by `speak`, before the first byte; every request, served or refused, ends in one log
line with its timings and one count in `polytts_requests_total` with its outcome.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import logging
import time
import unicodedata
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np
from pydantic import ValidationError

from audio.encoding import AudioFormat, codec_sample_rate, encode_whole, open_encoder, to_pcm16
from audio.output import Output, open_output
from audio.seams import ChunkJoiner
from audio.word_timings import Words, WordTiming
from cache import MemoryCache, synthesis_key
from engines import ENGINE_SPECS, FAMILIES
from engines.base import Engine, Param, SynthesisOptions, VoiceRef
from errors import ClientDisconnected, InvalidInput, PayloadTooLarge, ServiceError, Unavailable, invalid_fields
from gpu.engine_pool import EnginePool
from gpu.jobs import CLIENT_GONE, Job
from gpu.scheduler import Scheduler
from lifecycle.catalog import VoiceCatalog
from lifecycle.metrics import Metrics
from pcm_cache import PcmCache
from settings import Settings
from text.chunking import Chunk, PhraseSegmenter, cut_short, is_speakable, normalize_text
from text.languages import resolve_language
from text.live_text import LiveText
from text.scripts import unreadable_scripts
from text.spoken import Spoken, check_spoken_length
from voicebank.voice_entry import VoiceEntry

log = logging.getLogger("polytts.synthesis")
T = TypeVar("T")
CACHE_SLICE = 32 * 1024
"""A cached answer is sent in slices of this many bytes, as a generated one is sent in pieces."""
ENGINE_PARAMS = frozenset(name for spec in ENGINE_SPECS for name in spec.params.model_fields)
"""Request fields that are generation parameters of some engine family; another family's is a 422."""
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
"""The id of the request this task serves (its `X-Request-Id`), set by the web layer's middleware before anything
else runs: a request's log line carries it however deep the line is written."""


class VoiceRequest(Protocol):
    """Who speaks and how: what every speech request gives besides its text (the web layer's request models), and
    any family's generation parameters (ENGINE_PARAMS) as attributes, None where not given."""

    @property
    def voice_id(self) -> str | None: ...

    @property
    def language(self) -> str | None: ...


class SpeechRequest(VoiceRequest, Protocol):
    """A request whose text is given whole, with its own caps per generation (None: the engine's)."""

    @property
    def text(self) -> str: ...

    @property
    def max_chars_per_gen(self) -> int | None: ...

    @property
    def max_sentences_per_gen(self) -> int | None: ...


class ChunkSource(Protocol):
    """Where a synthesis's chunks come from, taken in order by the GPU thread: planned from the whole text
    (`PlannedChunks`), or cut from a live request's text as it arrives (text.live_text.LiveText)."""

    @property
    def unit_chars(self) -> tuple[int, ...]:
        """Characters of each chunk, when all are known in advance (admission's estimate of the work); else ()."""
        ...

    def ready(self) -> bool:
        """Whether a chunk, or the end, can be taken now: a job with none holds no step of the GPU thread."""
        ...

    def take(self) -> tuple[Chunk, bool] | None:
        """The next chunk and whether it is known to be the last; None once there are no more."""
        ...


class PlannedChunks:
    """The chunks of a text planned whole (`chunk_text`): all known, always ready; the next one may be cut short at
    one of its clauses (`shorten`) when the scheduler wants a shorter step."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self.unit_chars = tuple(len(chunk.text) for chunk in chunks)
        self._chunks = collections.deque(chunks)

    def ready(self) -> bool:
        return True

    def take(self) -> tuple[Chunk, bool] | None:
        if not self._chunks:
            return None
        chunk = self._chunks.popleft()
        return chunk, not self._chunks

    def shorten(self, max_chars: int) -> tuple[int, int] | None:
        """Cut the next chunk after its leading clauses within `max_chars` (`cut_short`): the characters of the two
        chunks it becomes; None where it cannot be."""
        cut = cut_short(self._chunks[0], max_chars) if self._chunks else None
        if cut is None:
            return None
        head, rest = cut
        self._chunks[0] = rest
        self._chunks.appendleft(head)
        return len(head.text), len(rest.text)

    def cut_steps(self, max_chars: int) -> list[tuple[int, ...]]:
        """For each chunk not taken yet, the characters of the steps it becomes when `shorten` cuts it at each."""
        steps = []
        for chunk in tuple(self._chunks):  # a copy: the GPU thread may be taking one
            sizes = []
            while (cut := cut_short(chunk, max_chars)) is not None:
                sizes.append(len(cut[0].text))
                chunk = cut[1]
            steps.append((*sizes, len(chunk.text)))
        return steps


@dataclass(frozen=True)
class Plan:
    """A request resolved and validated: what to synthesize, with what, and its cache key."""

    engine: Engine
    voice: VoiceRef
    voice_key: str
    text: str
    chunks: list[Chunk]
    options: SynthesisOptions
    cache_key: str | None
    """None while the engine's checkpoint is unknown: such a synthesis is neither served from nor put in a cache."""
    timed: bool = False
    """Word timings asked for: the engine times each word, and the synthesis does not come from a cache (which keeps
    audio only)."""

    @property
    def chars(self) -> int:
        """Characters of text (a live request's, as far as its phrases have been taken)."""
        return len(self.text) or sum(len(chunk.text) for chunk in self.chunks)


@dataclass
class RequestContext:
    """Who asks, through which route, and how to tell that they went away."""

    route: str
    principal: str = "anonymous"
    """The fairness key the request counts against."""
    streaming: bool = False
    """The answer is played as it arrives: the scheduler keeps it ahead of its listener (a playback clock)."""
    client: str | None = None
    """The client's address: one address holds at most a share of the admission slots."""
    engine: str | None = None
    """The engine the request asked for by name (an OpenAI `model`); its voice must belong to it."""
    disconnected: Callable[[], Awaitable[None]] | None = None
    """Returns once the client has gone away; work the request waits for is then cancelled."""
    close_connection: Callable[[], None] | None = None
    """Closes the client's connection at once, where the server lets it (a reader that never reads is let go so)."""
    request_id: str | None = field(default_factory=REQUEST_ID.get)
    """The request's `X-Request-Id`, in its log line (the request being served where the context is made)."""


@dataclass
class Timings:
    """One request's timings, logged as one line when it ends."""

    route: str
    request_id: str | None = None
    plan: Plan | None = None
    started: float = field(default_factory=time.perf_counter)
    cache: str = "miss"
    first_audio: float | None = None
    queue_wait: float = 0.0
    synthesis: float = 0.0
    audio_bytes: int = 0
    ended: float | None = None
    outcome: str | None = None
    in_flight: bool = False
    """Counted in `SynthesisService.in_flight` until it ends."""
    underrun: float | None = None
    """Streams only: seconds a listener playing in real time would have stalled (gpu.jobs.Job.underrun_s)."""

    def audio_seconds(self) -> float:
        return self.audio_bytes / 2 / self.plan.engine.sample_rate if self.plan else 0.0

    @property
    def total(self) -> float:
        return (self.ended or time.perf_counter()) - self.started

    @property
    def time_to_first_audio(self) -> float | None:
        return self.first_audio - self.started if self.first_audio is not None else None

    @property
    def real_time_factor(self) -> float | None:
        """Synthesis time over audio duration (a cache hit has none)."""
        audio = self.audio_seconds()
        return self.synthesis / audio if audio and self.cache == "miss" else None

    def log_line(self) -> str:
        ttfa, rtf, plan = self.time_to_first_audio, self.real_time_factor, self.plan
        return (
            f"{self.route} outcome={self.outcome} engine={plan.engine.name if plan else '-'} "
            f"voice={plan.voice_key if plan else '-'} chars={plan.chars if plan else 0} "
            f"chunks={len(plan.chunks) if plan else 0} cache={self.cache} queue={self.queue_wait:.3f}s "
            f"ttfa={f'{ttfa:.3f}s' if ttfa is not None else '-'} synth={self.synthesis:.3f}s total={self.total:.3f}s "
            f"audio={self.audio_seconds():.2f}s rtf={f'{rtf:.3f}' if rtf is not None else '-'} "
            f"underrun={f'{self.underrun:.3f}s' if self.underrun is not None else '-'} id={self.request_id or '-'}"
        )

    def server_timing(self) -> str:
        """The `Server-Timing` header: durations in milliseconds, counts as descriptions."""
        parts = [f"queue;dur={self.queue_wait * 1000:.1f}"]
        if (ttfa := self.time_to_first_audio) is not None:
            parts.append(f"ttfa;dur={ttfa * 1000:.1f}")
        parts += [f"synth;dur={self.synthesis * 1000:.1f}", f"total;dur={self.total * 1000:.1f}"]
        chars = self.plan.chars if self.plan else 0
        parts += [f'chars;desc="{chars}"', f'audio;desc="{self.audio_seconds():.3f}"']
        if (rtf := self.real_time_factor) is not None:
            parts.append(f'rtf;desc="{rtf:.3f}"')
        if self.underrun is not None:
            parts.append(f"underrun;dur={self.underrun * 1000:.1f}")
        return ", ".join(parts)


class Speech:
    """An admitted synthesis (or a cache hit) whose first audio is ready: its headers, its body, its end.

    Read it once, whole (`read`) or streamed (`stream`); either way the request's log line, metrics and cache entry
    are written when the audio ends, however it ends.
    """

    def __init__(
        self,
        service: SynthesisService,
        plan: Plan,
        timings: Timings,
        ctx: RequestContext,
        items: AsyncGenerator[bytes | Words, None],
        job: Job | None = None,
    ) -> None:
        self.service = service
        self.job = job
        """The synthesis's job (None for a cache hit)."""
        self.plan = plan
        self.timings = timings
        self.ctx = ctx
        self.words: list[WordTiming] = []
        """Every word timed so far (requests with timings)."""
        self._items = items
        self._first: bytes | Words = b""

    async def _start(self) -> None:
        """Wait for the first audio, so that a failure to load or start is still an error status."""
        self._first = await until_disconnected(self.ctx, anext(self._items, b""))

    async def events(self) -> AsyncGenerator[bytes | Words, None]:
        """PCM pieces and, after each chunk's audio, its word timings, as they are made; closing this early cancels
        the synthesis before its next step."""
        try:
            if self._first:
                yield self._first
            async for item in self._items:
                yield item
        finally:
            await self._items.aclose()

    def headers(self, fmt: AudioFormat) -> dict[str, str]:
        return {
            "X-Sample-Rate": str(codec_sample_rate(fmt, self.plan.engine.sample_rate)),
            "X-Audio-Format": "s16le" if fmt == "pcm" else fmt,
            "X-Channels": "1",
            "X-Engine": self.plan.engine.name,
            "X-Voice-Id": self.plan.voice_key,
            "X-Cache": self.timings.cache,
        }

    def pcm(self) -> AsyncGenerator[bytes, None]:
        """s16le PCM as it is generated (word timings go to `words`); closing it early cancels the synthesis."""
        return self._audio(self.events())

    def encoded(self, fmt: AudioFormat | Output) -> AsyncGenerator[bytes, None]:
        """The audio in `fmt` as it is generated (see `encoded_events`; word timings go to `words`)."""
        return self._audio(self.encoded_events(fmt))

    async def _audio(self, items: AsyncGenerator[bytes | Words, None]) -> AsyncGenerator[bytes, None]:
        async with contextlib.aclosing(items) as events:
            async for item in events:
                if isinstance(item, Words):
                    self.words += item.words
                else:
                    yield item

    async def encoded_events(self, fmt: AudioFormat | Output) -> AsyncGenerator[bytes | Words, None]:
        """The audio in `fmt` (a native format, or a front's `Output`: another rate, sample encoding or bit rate) as
        it is generated, and word timings after each chunk's audio: one encoder for the response, fed each piece as
        it comes. Codecs run on a worker thread a slice at a time, so encoding overlaps synthesis and never holds
        the event loop."""
        rate = self.plan.engine.sample_rate
        encoder = open_output(fmt, rate) if isinstance(fmt, Output) else open_encoder(fmt, rate)
        threaded = encoder.threaded
        try:
            if header := encoder.feed(b""):  # a container's header leaves at once
                yield header
            async with contextlib.aclosing(self.events()) as events:
                async for item in events:
                    if isinstance(item, Words):
                        yield item
                        continue
                    slices = encoder.feed_sliced(item)
                    while out := await asyncio.to_thread(next, slices, None) if threaded else next(slices, None):
                        yield out
            if tail := encoder.finish():
                yield tail
        finally:
            encoder.close()

    async def read(self, fmt: AudioFormat) -> bytes:
        """The whole answer in `fmt` (a WAV with its exact length); a client that goes away first cancels it."""

        async def collect() -> bytes:
            return b"".join([piece async for piece in self.pcm()])

        pcm = await until_disconnected(self.ctx, collect())
        if fmt in ("pcm", "wav"):
            return encode_whole(fmt, pcm, self.plan.engine.sample_rate)
        return await asyncio.to_thread(encode_whole, fmt, pcm, self.plan.engine.sample_rate)


async def until_disconnected(ctx: RequestContext, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client goes away first (then raise ClientDisconnected)."""
    task = asyncio.ensure_future(work)
    if ctx.disconnected is None:
        return await task
    watcher = asyncio.ensure_future(ctx.disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientDisconnected(f"client disconnected from {ctx.route} before its audio was ready")
    return task.result()


def _speakable(text: str) -> str:
    """Text with format characters (zero-width spaces, joiners, marks) removed; a lone surrogate is refused."""
    if any("\ud800" <= char <= "\udfff" for char in text):
        raise InvalidInput("text holds a lone UTF-16 surrogate, which is not a character", code="invalid_text")
    return "".join(char for char in text if unicodedata.category(char) != "Cf")


MIN_CHARS_PER_GEN = 20
"""Floor of a request's own cap on one generation: a smaller cap multiplies the work (one generation per word)."""


class Voicing:
    """How one request's chunks become its audio, on the GPU thread: each chunk's stream through the seam joiner
    (its own silence trimmed, a pause that fits its punctuation) and, when asked, its words timed in response time."""

    def __init__(self, engine: Engine, options: SynthesisOptions, timed: bool) -> None:
        self.engine = engine
        self.options = options
        self.timed = timed
        self.joiner = ChunkJoiner(engine.sample_rate)
        self.position = 0
        """Samples of the response so far."""

    def chunk(self, chunk: Chunk, handle: object, last: bool) -> Iterator[np.ndarray | Words]:
        start, words = self.position, []

        def timed_audio() -> Iterator[np.ndarray]:
            for audio, found in self.engine.stream_timed(chunk.text, handle, self.options, written=chunk.written):
                words.extend(found)
                yield audio

        pieces = timed_audio() if self.timed else self.engine.stream(chunk.text, handle, self.options)
        for piece in self.joiner.join(pieces, chunk.pause, last):
            self.position += len(piece)
            yield piece
        if self.timed:
            rate = self.engine.sample_rate
            # The joiner cut the chunk's own leading silence: its words move that much earlier.
            shift, low, high = (start - self.joiner.lead_trimmed) / rate, start / rate, self.position / rate
            words = [word.shifted(shift).clamped(low, high) for word in words]
        yield Words(words)  # also the end of the chunk's audio, words or not (Cartesia's `flush_done` counts them)


class SynthesisService:
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
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.catalog = catalog
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
            plan = timings.plan = await self.plan(request, ctx.engine, timed)
            cached = None if plan.timed else await self.cached_pcm(plan)
            if cached is not None:
                timings.cache = "hit"
                speech = Speech(self, plan, timings, ctx, self._cached_stream(timings, cached))
            else:
                job = self.submit(plan, ctx, PlannedChunks(plan.chunks))
                speech = Speech(self, plan, timings, ctx, self._generated(plan, job, timings), job)
            timings.in_flight = True
            self.in_flight += 1
            await speech._start()
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
    ) -> tuple[Speech, LiveText]:
        """Admit a live request: its voice planned now, its phrases spoken as its text (the LiveText returned) gets
        them (`phrase_chars`: as `live_text` has it); never cached."""
        timings = Timings(ctx.route, ctx.request_id)
        try:
            self.check_open()
            plan = await self.plan_voice(request, ctx.engine, timed)
            text = self.live_text(plan, self.scheduler.gpu.wake, phrase_chars)
            plan = timings.plan = dataclasses.replace(plan, chunks=text.taken)
            job = self.submit(plan, ctx, text)
            speech = Speech(self, plan, timings, ctx, self._generated(plan, job, timings), job)
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

    # -- planning --------------------------------------------------------------------------------------------------

    async def plan(self, request: SpeechRequest, engine_name: str | None = None, timed: bool = False) -> Plan:
        """The request resolved: its voice and engine, its text as spoken (what limits, chunk caps and the cache key
        count), its chunks and its cache key."""
        written = normalize_text(_speakable(request.text))
        if not is_speakable(written):
            raise InvalidInput("text is empty: it holds nothing to speak", code="empty_text")
        if len(written) > self.settings.max_text_chars:
            raise PayloadTooLarge(
                f"text is {len(written)} characters; the limit is {self.settings.max_text_chars}", code="text_too_long"
            )
        plan = await self.plan_voice(request, engine_name, timed)
        spoken = self.spoken(plan, written)
        text = spoken.text
        chunks = self.chunks(plan.engine, spoken, request)
        # A registered voice replaced under the same id must not hit audio cached for its old transcript.
        voice = plan.voice
        cache_voice = f"{plan.voice_key}@{voice.created_at}" if isinstance(voice, VoiceEntry) else plan.voice_key
        checkpoint = plan.engine.checkpoint
        key = (
            synthesis_key(
                text=text,
                voice_id=cache_voice,
                engine=plan.engine.name,
                checkpoint=checkpoint,
                # Where the text is cut into generations, and the pauses between them, change the audio too.
                params={**plan.options.cache_params(), "chunks": [[len(chunk.text), chunk.pause] for chunk in chunks]},
            )
            if checkpoint is not None
            else None
        )
        return dataclasses.replace(plan, text=text, chunks=chunks, cache_key=key)

    async def plan_voice(
        self, request: VoiceRequest, engine_name: str | None = None, timed: bool | None = False
    ) -> Plan:
        """Everything but the text: the voice, its engine (ready), the language and the engine's parameters. A live
        request plans this much before its text arrives. `timed` None: word timings where the engine has them."""
        if request.voice_id is None:  # the default voice: a failed default engine cannot even list it
            self.pool.engine_for(self.settings.default_engine)
        voice = await self.catalog.resolve(request.voice_id)
        if engine_name is not None and voice.engine != engine_name:
            raise InvalidInput(
                f"voice {str(request.voice_id)[:40]!r} belongs to engine {voice.engine}, not {engine_name} (the model)",
                code="voice_engine_mismatch",
                detail={"param": "voice"},
            )
        engine = self.pool.engine_for(voice.engine)
        if timed is None:
            timed = engine.word_timings
        if timed and not engine.word_timings:
            raise InvalidInput(
                f"engine {engine.name!r} cannot tell when each word is spoken; word timings come from Kokoro voices",
                code="timestamps_unsupported",
            )
        language = resolve_language(request.language or self.catalog.language_of(voice))
        engine.check_language(language)
        options = SynthesisOptions(language=language, params=self.engine_params(engine, request))
        voice_key = voice.voice_id if isinstance(voice, VoiceEntry) else voice.name
        return Plan(engine, voice, voice_key, "", [], options, None, timed)

    @staticmethod
    def engine_params(engine: Engine, request: VoiceRequest) -> dict[str, Param]:
        """The engine family's generation parameters: its defaults, overridden by what the request gave."""
        given = {name: value for name in ENGINE_PARAMS if (value := getattr(request, name, None)) is not None}
        spec = FAMILIES[engine.name]
        foreign = sorted(set(given) - set(spec.params.model_fields))
        if foreign:
            takes = ", ".join(spec.params.model_fields) or "none"
            verb = "does" if len(foreign) == 1 else "do"
            raise InvalidInput(
                f"{' and '.join(foreign)} {verb} not apply to engine {engine.name!r} (it takes: {takes})",
                code="unsupported_parameter",
            )
        try:
            params: dict[str, Param] = spec.params.model_validate(given).model_dump()
        except ValidationError as exc:  # a check of the family's own, beyond the request field's range
            raise invalid_fields(exc.errors()) from None
        if isinstance(params.get("speed"), float):
            params["speed"] = round(float(params["speed"]), 3)
        engine.check_params(params)
        return params

    def spoken(self, plan: Plan, written: str) -> Spoken:
        """`written` as the plan's engine will say it, within POLYTTS_MAX_SPOKEN_CHARS (413 `spoken_too_long`); text
        of which the engine reads nothing (every letter of a script the language does not read) is a 422
        `unreadable_text` naming the scripts."""
        spoken = plan.engine.spoken_text(written, plan.options)
        if not is_speakable(spoken.text):
            language = plan.options.language
            scripts = " and ".join(unreadable_scripts(written, language)[:3])
            raise InvalidInput(
                f"text holds nothing {language.name} reads: its letters are {scripts}, which {plan.engine.name} "
                "skips rather than spell out letter by letter; choose a voice or `language` that reads them"
                if scripts
                else f"text holds nothing {plan.engine.name} says in {language.name}",
                code="unreadable_text",
            )
        check_spoken_length(len(written), len(spoken.text), self.settings.max_spoken_chars)
        return spoken

    def live_text(self, plan: Plan, wake: Callable[[], None], phrase_chars: tuple[int, int] | None = None) -> LiveText:
        """The text of a live request planned as `plan` (its voice), cut into phrases as it arrives: each phrase as
        the engine says it, cut again when that is longer than the engine's cap, every limit counting spoken
        characters as `plan` does. `phrase_chars`: the request's own caps of its first and later phrases (a
        client's chunk schedule), within the engine's."""
        first, cap, _ = self.caps(plan.engine, None, None)
        if phrase_chars is not None:
            cap = min(cap, phrase_chars[1]) if cap else phrase_chars[1]
            first = min(phrase_chars[0], cap)
        return LiveText(
            PhraseSegmenter(first, cap),
            self.settings.max_text_chars,
            wake,
            speak=lambda text: plan.engine.spoken_text(text, plan.options),
            max_spoken_chars=self.settings.max_spoken_chars,
        )

    @classmethod
    def chunks(cls, engine: Engine, text: Spoken, request: SpeechRequest) -> list[Chunk]:
        """The text as spoken split by the engine's caps per generation, or the request's own (0 meaning unlimited):
        caps count spoken characters, so one step is one step's worth of audio however the text was written."""
        return text.chunks(*cls.caps(engine, request.max_chars_per_gen, request.max_sentences_per_gen))

    @staticmethod
    def caps(engine: Engine, max_chars_per_gen: int | None, max_sentences_per_gen: int | None) -> tuple[int, int, int]:
        """(first chunk, every chunk, sentences per chunk) caps: the engine's, or the request's own (0 unlimited)."""
        caps = engine.caps
        max_chars = caps.max_chunk_chars if max_chars_per_gen is None else max_chars_per_gen
        if 0 < max_chars < MIN_CHARS_PER_GEN:
            raise InvalidInput(
                f"max_chars_per_gen must be 0 (unlimited) or at least {MIN_CHARS_PER_GEN}; a smaller cap multiplies "
                "the work without making the first audio earlier",
                code="invalid_input",
            )
        max_sentences = caps.max_sentences if max_sentences_per_gen is None else max_sentences_per_gen
        first = caps.first_chunk_chars or max_chars
        if max_chars:
            first = min(first, max_chars) if first else max_chars
        return first, max_chars, max_sentences

    # -- caches ----------------------------------------------------------------------------------------------------

    async def cached_pcm(self, plan: Plan) -> bytes | None:
        """The finished audio of an identical earlier request: from memory, else from disk (off the event loop)."""
        if plan.cache_key is None:
            return None
        pcm = self.memory_cache.get(plan.cache_key)
        if pcm is None:
            pcm = await asyncio.to_thread(self.pcm_cache.get, plan.cache_key)
            if pcm is not None:
                self.memory_cache.put(plan.cache_key, pcm)
        self.metrics.cache.labels("hit" if pcm is not None else "miss").inc()
        return pcm

    async def store(self, plan: Plan, pcm: bytes) -> None:
        if not pcm or plan.cache_key is None:
            return
        self.memory_cache.put(plan.cache_key, pcm)
        try:
            await asyncio.to_thread(self.pcm_cache.put, plan.cache_key, pcm)
        except OSError as exc:  # the request is served all the same; one line says why the entry is missing
            log.warning("%s", exc)

    async def _cached_stream(self, timings: Timings, pcm: bytes) -> AsyncGenerator[bytes, None]:
        outcome = "cancelled"
        try:
            for start in range(0, len(pcm), CACHE_SLICE):
                piece = pcm[start : start + CACHE_SLICE]
                if timings.first_audio is None:
                    timings.first_audio = time.perf_counter()
                timings.audio_bytes += len(piece)
                yield piece
            outcome = "ok"
        finally:
            self.finish(timings, outcome)

    # -- generation ------------------------------------------------------------------------------------------------

    def submit(self, plan: Plan, ctx: RequestContext, chunks: ChunkSource) -> Job:
        """Admit the synthesis (or raise Busy); its steps, one chunk each as `chunks` gives them, run on the GPU
        thread, interleaved fairly with other requests' steps."""
        engine = plan.engine
        manager = self.pool.manager

        def steps() -> Iterator[Iterator[np.ndarray | Words]]:
            voice = Voicing(engine, plan.options, plan.timed)
            try:
                while (taken := chunks.take()) is not None:
                    chunk, last = taken
                    # Another request may have switched engines between two steps: load again if so.
                    self.pool.ensure(engine.name)
                    handle = engine.prepare_voice(plan.voice)  # cached by the engine after the first time
                    yield voice.chunk(chunk, handle, last)
                    manager.touch(engine.name)
            finally:
                engine.release()

        timeout = self.settings.request_timeout_s
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
            ready=chunks.ready,
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
        outcome = "cancelled"
        try:
            async for samples in job.pieces():
                if isinstance(samples, Words):
                    yield samples
                    continue
                pcm = to_pcm16(samples)
                if timings.first_audio is None:
                    timings.first_audio = time.perf_counter()
                pieces.append(pcm)
                timings.audio_bytes += len(pcm)
                yield pcm
            outcome = "ok"
            await self.store(plan, b"".join(pieces))
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
