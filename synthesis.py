"""Serving logic of the synthesis routes: resolve a request, serve it from cache or the GPU thread, time it.

Everything a client can get wrong is decided in `plan` (and admission in `submit`), before the first byte.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from audio import pcm_to_wav, to_pcm16, wav_to_pcm
from cache import WavCache, synthesis_key
from engines import FAMILIES
from engines.base import BlendVoice, BuiltinVoice, Engine, Param, SynthesisOptions, VoiceRef
from engines.voicepacks import canonical_blend, is_blend, parse_blend
from errors import InvalidInput, NotFound, PayloadTooLarge, ServiceError, Unavailable
from metrics import Metrics
from pcm_cache import PcmCache
from protocol import ENGINE_PARAMS, TTSRequest
from registry import VOICE_ID_RE, VoiceRegistry
from voice_entry import VoiceEntry
from residency import ModelManager
from scheduler import Job, JobCancelled, Scheduler
from settings import Settings
from text import chunk_text, normalize_text, resolve_language

log = logging.getLogger("polytts.synthesis")


@dataclass
class EngineState:
    """Readiness of one engine as /health and the routes see it."""

    status: Literal["idle", "warming", "ready", "failed"] = "idle"
    reason: str | None = None
    since: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Plan:
    """A request resolved and validated: what to synthesize, with what, and its cache key."""

    engine: Engine
    voice: VoiceRef
    voice_key: str
    text: str
    chunks: list[str]
    options: SynthesisOptions
    cache_key: str | None
    """None while the engine's checkpoint is unknown: such a synthesis is neither served from nor put in a cache."""


@dataclass
class Timings:
    """One request's timings, logged as one line when it ends."""

    route: str
    plan: Plan
    started: float = field(default_factory=time.perf_counter)
    cache: str = "miss"
    first_audio: float | None = None
    queue_wait: float = 0.0
    synthesis: float = 0.0
    audio_bytes: int = 0
    underrun: float | None = None
    """Streams only: seconds a listener playing in real time would have stalled (scheduler.Job.underrun_s)."""

    ended: float | None = None

    def audio_seconds(self) -> float:
        return self.audio_bytes / 2 / self.plan.engine.sample_rate

    def end(self) -> None:
        self.ended = time.perf_counter()

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

    def log(self, outcome: str) -> None:
        ttfa, rtf = self.time_to_first_audio, self.real_time_factor
        log.info(
            "%s outcome=%s engine=%s voice=%s chars=%d chunks=%d cache=%s queue=%.3fs ttfa=%s synth=%.3fs "
            "total=%.3fs audio=%.2fs rtf=%s underrun=%s",
            self.route, outcome, self.plan.engine.name, self.plan.voice_key, len(self.plan.text),
            len(self.plan.chunks), self.cache, self.queue_wait, f"{ttfa:.3f}s" if ttfa is not None else "-",
            self.synthesis, self.total, self.audio_seconds(), f"{rtf:.3f}" if rtf is not None else "-",
            f"{self.underrun:.3f}s" if self.underrun is not None else "-",
        )  # fmt: skip

    def server_timing(self) -> str:
        """The `Server-Timing` header: durations in milliseconds, counts as descriptions."""
        parts = [f"queue;dur={self.queue_wait * 1000:.1f}"]
        if (ttfa := self.time_to_first_audio) is not None:
            parts.append(f"ttfa;dur={ttfa * 1000:.1f}")
        parts += [f"synth;dur={self.synthesis * 1000:.1f}", f"total;dur={self.total * 1000:.1f}"]
        parts += [f'chars;desc="{len(self.plan.text)}"', f'audio;desc="{self.audio_seconds():.3f}"']
        if (rtf := self.real_time_factor) is not None:
            parts.append(f'rtf;desc="{rtf:.3f}"')
        if self.underrun is not None:
            parts.append(f"underrun;dur={self.underrun * 1000:.1f}")
        return ", ".join(parts)


class SynthesisService:
    def __init__(
        self,
        *,
        settings: Settings,
        registry: VoiceRegistry,
        engines: dict[str, Engine],
        states: dict[str, EngineState],
        manager: ModelManager,
        scheduler: Scheduler,
        wav_cache: WavCache,
        pcm_cache: PcmCache,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.engines = engines
        self.states = states
        self.manager = manager
        self.scheduler = scheduler
        self.wav_cache = wav_cache
        self.pcm_cache = pcm_cache
        self.metrics = metrics
        self._warming: dict[str, asyncio.Task[None]] = {}

    def warm(self, name: str) -> None:
        """Load an engine (and run its warm-up) on the GPU thread; the engine answers 503 `warming` meanwhile."""
        if name in self._warming:
            return
        self.states[name] = EngineState("warming")
        task = asyncio.get_running_loop().create_task(self._warm(name))
        self._warming[name] = task
        task.add_done_callback(lambda _: self._warming.pop(name, None))

    async def _warm(self, name: str) -> None:
        started = time.perf_counter()
        try:
            engine = await self.scheduler.gpu.run(self.manager.ensure, name)
            await self.scheduler.gpu.run(engine.warmup)
        except Exception as exc:
            self.states[name] = EngineState("failed", str(exc))
            log.error("engine %s failed to load: %s", name, exc, exc_info=not isinstance(exc, ServiceError))
            return
        self.states[name] = EngineState("ready")
        log.info("engine %s ready in %.2fs", name, time.perf_counter() - started)

    def builtin_voices(self) -> dict[str, BuiltinVoice]:
        return {v.name: v for engine in self.engines.values() for v in engine.builtin_voices()}

    def resolve_voice(self, voice_id: str | None) -> VoiceRef:
        name = voice_id or self.settings.default_voice
        if is_blend(name):
            return self.resolve_blend(name)
        builtin = self.builtin_voices().get(name)
        if builtin is not None:
            return builtin
        if not VOICE_ID_RE.match(name):
            for engine_name, state in self.states.items():
                # An engine that is loading or failed cannot list its packs yet: the name may be one of them.
                if state.status in ("warming", "failed") and not self.engines[engine_name].builtin_voices():
                    self.engine_for(engine_name)
            raise NotFound(f"no voice {name!r}: not a registered voice id nor a built-in voice", code="voice_not_found")
        return self.registry.get(name)

    def resolve_blend(self, formula: str) -> BlendVoice:
        """Resolve every part of `a(2)+b(1)` to a pack voice of one engine; a bad part is a 422 that names it."""
        parts = parse_blend(formula)
        voices: list[BuiltinVoice | VoiceEntry] = []
        for index, part in enumerate(parts):
            where = {"part": part.name, "index": index}
            try:
                voice = self.resolve_voice(part.name)
            except Unavailable:  # the engine is loading or failed: not the formula's fault
                raise
            except ServiceError as exc:
                raise InvalidInput(f"blend part {part.name!r}: {exc.message}", code="invalid_blend", detail=where) from exc
            family = FAMILIES.get(voice.engine)
            blendable = family is not None and family.accepts_packs
            if not blendable or (isinstance(voice, VoiceEntry) and voice.kind != "pack"):
                raise InvalidInput(
                    f"blend part {part.name!r} is a {voice.engine} voice cloned from a clip; only style packs blend",
                    code="invalid_blend",
                    detail=where,
                )
            if voices and voice.engine != voices[0].engine:
                raise InvalidInput(f"blend part {part.name!r} belongs to another engine", code="invalid_blend", detail=where)
            voices.append(voice)  # type: ignore[arg-type]
        return BlendVoice(canonical_blend(parts), voices[0].engine, tuple(zip(voices, (p.weight for p in parts))))

    def engine_for(self, name: str) -> Engine:
        engine = self.engines.get(name)
        if engine is None:
            raise InvalidInput(
                f"engine {name!r} is not served by this node (it serves: {', '.join(sorted(self.engines))})",
                code="engine_unavailable",
            )
        state = self.states[name]
        retry = self.settings.retry_after_seconds
        if state.status == "warming":
            raise Unavailable(f"engine {name!r} is loading; retry shortly", code="warming", retry_after=retry)
        if state.status == "failed":
            # A failed engine answers 503 for Retry-After seconds; the first request after that starts a new load.
            if time.monotonic() - state.since >= retry:
                self.warm(name)
                raise Unavailable(f"engine {name!r} is loading again; retry shortly", code="warming", retry_after=retry)
            raise Unavailable(f"engine {name!r} failed to load: {state.reason}", code="engine_failed", retry_after=retry)
        return engine

    def plan(self, request: TTSRequest) -> Plan:
        text = normalize_text(request.text)
        if not text:
            raise InvalidInput("text is empty", code="empty_text")
        if len(text) > self.settings.max_text_chars:
            raise PayloadTooLarge(
                f"text is {len(text)} characters; the limit is {self.settings.max_text_chars}", code="text_too_long"
            )
        if request.voice_id is None:  # the default voice: a failed default engine cannot even list it
            self.engine_for(self.settings.default_engine)
        voice = self.resolve_voice(request.voice_id)
        engine = self.engine_for(voice.engine)
        language = resolve_language(request.language)
        engine.check_language(language)
        options = SynthesisOptions(language=language, params=self.engine_params(engine, request))
        voice_key = voice.voice_id if isinstance(voice, VoiceEntry) else voice.name
        chunks = self.chunks(engine, text, request)
        # A registered voice replaced under the same id must not hit audio cached for its old transcript.
        cache_voice = f"{voice_key}@{voice.created_at}" if isinstance(voice, VoiceEntry) else voice_key
        checkpoint = engine.checkpoint
        key = (
            synthesis_key(
                text=text,
                voice_id=cache_voice,
                engine=engine.name,
                checkpoint=checkpoint,
                # Where the text is cut into generations changes the audio too.
                params={**options.cache_params(), "chunks": [len(chunk) for chunk in chunks]},
            )
            if checkpoint is not None
            else None
        )
        return Plan(engine, voice, voice_key, text, chunks, options, key)

    @staticmethod
    def engine_params(engine: Engine, request: TTSRequest) -> dict[str, Param]:
        """The engine's generation parameters: its defaults, overridden by what the request gave."""
        given = {name: value for name in ENGINE_PARAMS if (value := getattr(request, name)) is not None}
        foreign = sorted(set(given) - set(engine.params))
        if foreign:
            takes = ", ".join(engine.params) or "none"
            raise InvalidInput(
                f"{', '.join(foreign)} do(es) not apply to engine {engine.name!r} (it takes: {takes})",
                code="unsupported_parameter",
            )
        params = {**engine.params, **given}
        if isinstance(params.get("speed"), float):
            params["speed"] = round(float(params["speed"]), 3)
        engine.check_params(params)
        return params

    @staticmethod
    def chunks(engine: Engine, text: str, request: TTSRequest) -> list[str]:
        """Text split by the engine's caps per generation, or the request's own (0 meaning unlimited)."""
        caps = engine.caps
        max_chars = caps.max_chunk_chars if request.max_chars_per_gen is None else request.max_chars_per_gen
        max_sentences = caps.max_sentences if request.max_sentences_per_gen is None else request.max_sentences_per_gen
        first = caps.first_chunk_chars or max_chars
        if max_chars:
            first = min(first, max_chars) if first else max_chars
        return chunk_text(text, first, max_chars, max_sentences)

    def cached_pcm(self, plan: Plan) -> bytes | None:
        if plan.cache_key is None:
            return None
        pcm = self.pcm_cache.get(plan.cache_key)
        if pcm is None and (wav := self.wav_cache.get(plan.cache_key)) is not None:
            pcm = wav_to_pcm(wav)
        self.metrics.cache.labels("hit" if pcm is not None else "miss").inc()
        return pcm

    def cached_wav(self, plan: Plan) -> bytes | None:
        if plan.cache_key is None:
            return None
        wav = self.wav_cache.get(plan.cache_key)
        if wav is None and (pcm := self.pcm_cache.get(plan.cache_key)) is not None:
            wav = pcm_to_wav(pcm, plan.engine.sample_rate)
            self.wav_cache.put(plan.cache_key, wav)
        self.metrics.cache.labels("hit" if wav is not None else "miss").inc()
        return wav

    def submit(self, plan: Plan, key: str, *, streaming: bool = False, client: str | None = None) -> Job:
        """Admit the synthesis for fairness key `key` (or raise Busy); its steps, one chunk each, run on the GPU
        thread, interleaved fairly with other requests' steps. `streaming`: the response is played as it arrives;
        `client`: the peer address (one address holds at most a share of the slots)."""
        engine = plan.engine

        def steps() -> Iterator[Iterator[np.ndarray]]:
            try:
                for chunk in plan.chunks:
                    # Another request may have switched engines between two steps: load again if so.
                    self.manager.ensure(engine.name)
                    handle = engine.prepare_voice(plan.voice)  # cached by the engine after the first time
                    yield engine.stream(chunk, handle, plan.options)
                    self.manager.touch(engine.name)
            finally:
                engine.release()

        timeout = self.settings.request_timeout_s
        job = Job(
            engine=engine.name,
            chars=len(plan.text),
            steps=steps,
            loop=asyncio.get_running_loop(),
            key=key,
            deadline=time.monotonic() + timeout if timeout else None,
            # --- h-sched: what the scheduler needs to plan streams and per-address slots ---
            streaming=streaming,
            sample_rate=engine.sample_rate,
            unit_chars=tuple(len(chunk) for chunk in plan.chunks),
            client=client,
        )
        return self.scheduler.submit(job)

    async def pcm_stream(self, plan: Plan, job: Job, timings: Timings) -> AsyncIterator[bytes]:
        """s16le PCM pieces as they are generated; caches the whole only when the synthesis completed cleanly."""
        pieces: list[bytes] = []
        outcome = "cancelled"
        try:
            async for samples in job.pieces():
                pcm = to_pcm16(samples)
                if timings.first_audio is None:
                    timings.first_audio = time.perf_counter()
                pieces.append(pcm)
                timings.audio_bytes += len(pcm)
                yield pcm
            outcome = "ok"
            self.store(plan, b"".join(pieces))
        except Exception as exc:
            outcome = "timeout" if isinstance(exc, JobCancelled) else "failed"
            if timings.first_audio is None:  # still answerable with an error status
                log.warning("synthesis failed before any audio (engine=%s): %s", plan.engine.name, exc)
            else:
                log.exception("synthesis failed mid-stream (engine=%s voice=%s)", plan.engine.name, plan.voice_key)
            raise
        finally:
            job.cancel()
            if job.started_at is not None:
                timings.queue_wait = job.started_at - job.submitted_at
            timings.synthesis = job.gpu_seconds
            if job.streaming:
                timings.underrun = job.underrun_s
            self.finish(timings, outcome)

    def finish(self, timings: Timings, outcome: str) -> None:
        """A request ended: its one log line, and its metrics."""
        timings.end()
        timings.log(outcome)
        engine = timings.plan.engine.name
        self.metrics.requests.labels(engine, timings.route, outcome).inc()
        if (ttfa := timings.time_to_first_audio) is not None and outcome == "ok":
            self.metrics.time_to_first_audio.labels(engine).observe(ttfa)
        if (rtf := timings.real_time_factor) is not None and outcome == "ok":
            self.metrics.real_time_factor.labels(engine).observe(rtf)

    def store(self, plan: Plan, pcm: bytes) -> None:
        if not pcm or plan.cache_key is None:
            return
        self.wav_cache.put(plan.cache_key, pcm_to_wav(pcm, plan.engine.sample_rate))
        try:
            self.pcm_cache.put(plan.cache_key, pcm)
        except OSError:
            log.warning("could not write the PCM cache entry %s", plan.cache_key, exc_info=True)
