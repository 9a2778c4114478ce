"""The FastAPI app: an app factory, a lifespan that binds first and warms after, and thin routes.

Run it with `./run.sh` (or `python server.py`): it binds the port itself, so a port already in use is a
non-zero exit with a message that says so, not uvicorn's silent exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import importlib.util
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from audio import pcm_to_wav
from cache import WavCache
from engines import FAMILIES
from engines.base import BuiltinVoice, Engine, EngineCaps, EngineLoadError
from engines.kokoro import KokoroEngine
from engines.mlx_qwen import MlxQwenEngine
from engines.mlx_voxcpm import MlxVoxCPMEngine
from engines.voxcpm import VoxCPMEngine
from errors import ClientDisconnected, Conflict, InvalidInput, Unauthorized
from http_errors import install_error_handlers
from metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from metrics import Metrics
from pcm_cache import PcmCache
from protocol import TTSRequest, UnloadResult, VoiceCreated
from registry import Registration, VoiceRegistry, check_voice_id
from residency import ManagedUnit, ModelManager, ResidencyPolicy
from runtime import RuntimeRefused, check_runtime, uses_mlx
from scheduler import GpuThread, Scheduler
from settings import Settings, SettingsError, load_settings
from synthesis import EngineState, Plan, SynthesisService, Timings
from uploads import FormPart, read_form

log = logging.getLogger("polytts.server")
T = TypeVar("T")
STREAM_SLICE = 32 * 1024


@dataclass
class Service:
    """Everything the routes use, built in the lifespan."""

    settings: Settings
    registry: VoiceRegistry
    engines: dict[str, Engine]
    states: dict[str, EngineState]
    manager: ModelManager
    gpu: GpuThread
    scheduler: Scheduler
    synthesis: SynthesisService
    started_at: float

    def status(self) -> tuple[str, str | None]:
        state = self.states[self.settings.default_engine]
        if state.status in ("warming", "failed"):
            return state.status, state.reason
        return "ready", None


def build_engines(settings: Settings) -> dict[str, Engine]:
    caps = EngineCaps(first_chunk_chars=settings.first_chunk_chars, max_chunk_chars=settings.chunk_chars)
    kokoro = KokoroEngine(
        backend=settings.kokoro_backend,
        runtime=settings.runtime,
        onnx_dir=settings.kokoro_onnx_path,
        torch_model=settings.kokoro_model,
        mlx_model=settings.mlx_kokoro_model,
        mlx_cache_mb=settings.mlx_cache_mb,
        threads=settings.onnx_threads,
        caps=caps,
    )
    engines: dict[str, Engine] = {kokoro.name: kokoro}
    # VoxCPM streams inside a generation, so its first chunk needs no shorter cap.
    voxcpm_caps = EngineCaps(0, settings.voxcpm_max_chars, settings.voxcpm_max_sentences, interleavable=False)
    if uses_mlx(settings.runtime):
        mlx_voxcpm = MlxVoxCPMEngine(
            model=settings.mlx_voxcpm_model,
            cache_mb=settings.mlx_cache_mb,
            max_voices=settings.max_voices_mem,
            max_ref_seconds=settings.voxcpm_max_ref_seconds,
            max_len=settings.voxcpm_max_len,
            caps=voxcpm_caps,
        )
        qwen = MlxQwenEngine(
            model=settings.mlx_qwen_model,
            cache_mb=settings.mlx_cache_mb,
            max_voices=settings.max_voices_mem,
            max_ref_seconds=settings.voxcpm_max_ref_seconds,
            max_tokens=settings.qwen_max_tokens,
            stream_interval=settings.stream_interval,
            caps=EngineCaps(0, 300, 0, interleavable=False),
        )
        engines |= {mlx_voxcpm.name: mlx_voxcpm, qwen.name: qwen}
    elif importlib.util.find_spec("voxcpm") is not None:
        voxcpm = VoxCPMEngine(
            model=settings.voxcpm_model,
            runtime=settings.runtime,
            denoiser=settings.voxcpm_denoiser,
            max_ref_seconds=settings.voxcpm_max_ref_seconds,
            max_len=settings.voxcpm_max_len,
            caps=voxcpm_caps,
        )
        engines[voxcpm.name] = voxcpm
    return engines


def build_service(settings: Settings) -> Service:
    engines = build_engines(settings)
    states = {name: EngineState() for name in engines}

    # Read at scrape time, once the scheduler and the manager below exist.
    metrics = Metrics(lambda: scheduler.stats(), lambda: manager.status())

    def unit(engine: Engine) -> ManagedUnit:
        def loader() -> Engine:
            started = time.perf_counter()
            try:
                engine.load()
            except Exception as exc:
                states[engine.name] = EngineState("failed", str(exc))
                if isinstance(exc, EngineLoadError):
                    raise
                raise EngineLoadError(f"{engine.name} failed to load: {exc}") from exc
            if states[engine.name].status != "warming":  # a warm-up declares itself ready when it is done
                states[engine.name] = EngineState("ready")
            metrics.load_seconds.labels(engine.name).observe(time.perf_counter() - started)
            return engine

        default = engine.name == settings.default_engine
        policy = ResidencyPolicy[settings.default_residency] if default else ResidencyPolicy.UNPINNED
        return ManagedUnit(engine.name, loader, lambda _: engine.unload(), engine.footprint, policy)

    manager = ModelManager([unit(e) for e in engines.values()], settings.idle_evict_seconds, coload=settings.coload)
    gpu = GpuThread()
    scheduler = Scheduler(gpu, settings.fairness_policy(), manager.resident)
    registry = VoiceRegistry(
        settings.voices_dir,
        families=FAMILIES,
        max_upload_bytes=settings.max_upload_bytes,
        min_seconds=settings.voice_min_seconds,
        max_seconds=settings.voice_max_seconds,
    )
    synthesis = SynthesisService(
        settings=settings,
        registry=registry,
        engines=engines,
        states=states,
        manager=manager,
        scheduler=scheduler,
        wav_cache=WavCache(settings.wav_cache_bytes),
        pcm_cache=PcmCache(settings.cache_dir / "pcm", settings.pcm_cache_bytes),
        metrics=metrics,
    )
    return Service(settings, registry, engines, states, manager, gpu, scheduler, synthesis, time.time())


async def _evict_idle(service: Service) -> None:
    period = min(5.0, max(0.2, service.settings.idle_evict_seconds / 4))
    while True:
        await asyncio.sleep(period)
        await service.gpu.run(service.manager.maybe_evict)


async def _until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client goes away first (then raise ClientDisconnected)."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientDisconnected(f"client disconnected from {request.url.path} before its audio was ready")
    return task.result()


class AccessLog:
    """One log line per request with its status and time; the synthesis routes log their own, with audio timings.

    Plain ASGI rather than BaseHTTPMiddleware, which would buffer streamed bodies and hide client disconnects.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/tts"):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            log.info("%s %s %d %.3fs", scope["method"], scope["path"], status, time.perf_counter() - started)


def _bool_field(parts: dict[str, FormPart], name: str) -> bool:
    part = parts.get(name)
    if part is None:
        return False
    value = part.text().strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise InvalidInput(f"{name} must be true or false, not {value!r}", code="invalid_field")


def _headers(plan: Plan, cache: str) -> dict[str, str]:
    return {
        "X-Sample-Rate": str(plan.engine.sample_rate),
        "X-Audio-Format": "s16le",
        "X-Channels": "1",
        "X-Engine": plan.engine.name,
        "X-Voice-Id": plan.voice_key,
        "X-Cache": cache,
    }


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = build_service(settings)
        service.gpu.start()
        app.state.service = service
        tasks = [asyncio.create_task(_evict_idle(service))]
        if settings.warm_on_start:
            # Bind first, warm after: the port opens while the default engine loads on the GPU thread.
            service.synthesis.warm(settings.default_engine)
        log.info("serving %d voices from %s; engines: %s", len(service.registry), settings.voices_dir, ", ".join(service.engines))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            service.gpu.stop()

    app = FastAPI(title="PolyTTS", lifespan=lifespan)
    install_error_handlers(app, settings.retry_after_seconds)
    app.add_middleware(AccessLog)

    def svc(request: Request) -> Service:
        return request.app.state.service  # type: ignore[no-any-return]

    def principal(request: Request) -> str:
        """Who a request counts as for fairness: its API key's name when keys are configured (then a key is
        required), else its `X-Fairness-Key`, else the anonymous key. A name grants nothing by itself."""
        if settings.api_keys:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            name = settings.api_keys.get(token.strip()) if scheme.lower() == "bearer" else None
            if name is None:
                raise Unauthorized("a valid API key is required: Authorization: Bearer <key>", code="unauthorized")
            return name
        key = request.headers.get("x-fairness-key", "").strip()
        if key and not (len(key) <= 64 and key.isprintable()):
            raise InvalidInput("X-Fairness-Key must be at most 64 printable characters", code="invalid_fairness_key")
        return key or "anonymous"

    async def authorized(request: Request) -> None:
        principal(request)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        return Response(svc(request).synthesis.metrics.render(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        service = svc(request)
        status, reason = service.status()
        default = service.engines[settings.default_engine]
        return {
            "status": status,
            "reason": reason,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - service.started_at, 3),
            "device": default.describe()["device"],
            "default_engine": settings.default_engine,
            "runtime": "mlx" if uses_mlx(settings.runtime) else settings.runtime,
            "serves": sorted(service.engines),
            "engines": {
                name: {**engine.describe(), "state": service.states[name].status, "reason": service.states[name].reason}
                for name, engine in service.engines.items()
            },
            "resident": [
                {"engine": name, "checkpoint": service.engines[name].checkpoint} for name in service.manager.resident()
            ],
            "manager": service.manager.status(),
            "inflight": service.scheduler.stats(),
            "limits": {
                "max_inflight": settings.max_inflight,
                "max_queued_chars": settings.max_queued_chars,
                "max_text_chars": settings.max_text_chars,
                "max_upload_bytes": settings.max_upload_bytes,
            },
            "voices": {
                "registered": len(service.registry),
                "by_engine": service.registry.engines_in_use(),
                "ids": [v.voice_id for v in service.registry.list()],
                "builtin": sorted(service.synthesis.builtin_voices()),
            },
            "caches": {"wav": service.synthesis.wav_cache.stats(), "pcm": service.synthesis.pcm_cache.stats()},
        }

    @app.get("/ready")
    async def ready(request: Request) -> JSONResponse:
        status, reason = svc(request).status()
        if status == "ready":
            return JSONResponse({"status": status})
        retry = {"Retry-After": str(max(1, round(settings.retry_after_seconds)))}
        return JSONResponse({"status": status, "reason": reason}, status_code=503, headers=retry)

    @app.post("/voices", response_model=VoiceCreated, dependencies=[Depends(authorized)])
    async def register_voice(request: Request) -> JSONResponse:
        service = svc(request)
        parts = await read_form(request, file_limit=settings.max_upload_bytes)
        audio = parts.get("audio")
        pack = parts.get("voice_pack")
        if (audio is None or audio.filename is None) and (pack is None or pack.filename is None):
            raise InvalidInput(
                "the form needs an 'audio' file (or, for kokoro, a 'voice_pack' file)", code="audio_required"
            )
        engine = parts.get("engine")
        if engine is None or not engine.text().strip():
            raise InvalidInput(f"the form needs an 'engine' (one of {', '.join(FAMILIES)})", code="engine_required")
        seed = parts.get("seed_audio")
        seed_text = parts.get("seed_text")
        registration = Registration(
            audio=bytes(audio.data) if audio is not None else b"",
            voice_pack=bytes(pack.data) if pack is not None else None,
            voice_pack_filename=(pack.filename or "") if pack is not None else "",
            engine=engine.text().strip(),
            ref_text=parts["ref_text"].text() if "ref_text" in parts else "",
            x_vector_only_mode=_bool_field(parts, "x_vector_only_mode"),
            seed_audio=bytes(seed.data) if seed is not None and seed.data else None,
            seed_text=seed_text.text() if seed_text is not None else None,
            replace=_bool_field(parts, "replace"),
        )
        entry, created = await asyncio.to_thread(service.registry.register, registration)
        body = VoiceCreated(voice_id=entry.voice_id, created=created)
        return JSONResponse(body.model_dump(), status_code=201 if created else 200)

    def voice_view(service: Service, voice: Any) -> dict[str, Any]:
        if isinstance(voice, BuiltinVoice):
            return {**voice.public(), "servable": voice.engine in service.engines}
        return {**voice.public(), "builtin": False, "servable": voice.engine in service.engines}

    @app.get("/voices", dependencies=[Depends(authorized)])
    async def list_voices(request: Request) -> dict[str, Any]:
        service = svc(request)
        registered = [voice_view(service, v) for v in service.registry.list()]
        builtin = [voice_view(service, v) for v in service.synthesis.builtin_voices().values()]
        return {"voices": registered + builtin}

    @app.get("/voices/{voice_id}", dependencies=[Depends(authorized)])
    async def get_voice(request: Request, voice_id: str) -> dict[str, Any]:
        service = svc(request)
        builtin = service.synthesis.builtin_voices().get(voice_id)
        return voice_view(service, builtin or service.registry.get(check_voice_id(voice_id)))

    @app.delete("/voices/{voice_id}", dependencies=[Depends(authorized)])
    async def delete_voice(request: Request, voice_id: str) -> dict[str, str]:
        service = svc(request)
        if voice_id in service.synthesis.builtin_voices():
            raise Conflict(f"{voice_id!r} is a built-in voice and cannot be deleted", code="builtin_voice")
        entry = await asyncio.to_thread(service.registry.delete, check_voice_id(voice_id))
        return {"deleted": entry.voice_id}

    @app.post("/tts")
    async def tts(request: Request, body: TTSRequest) -> Response:
        key = principal(request)
        service = svc(request).synthesis
        plan = service.plan(body)
        timings = Timings("tts", plan)
        wav = service.cached_wav(plan)
        if wav is not None:
            timings.cache = "hit"
            timings.audio_bytes = len(wav) - 44
            service.finish(timings, "ok")
        else:
            job = service.submit(plan, key, client=request.client.host if request.client else None)

            async def collect() -> bytes:
                return b"".join([pcm async for pcm in service.pcm_stream(plan, job, timings)])

            wav = pcm_to_wav(await _until_disconnect(request, collect()), plan.engine.sample_rate)
        headers = _headers(plan, timings.cache)
        headers.pop("X-Audio-Format")
        headers["Server-Timing"] = timings.server_timing()
        return Response(wav, media_type="audio/wav", headers=headers)

    @app.post("/tts/stream")
    async def tts_stream(request: Request, body: TTSRequest) -> StreamingResponse:
        key = principal(request)
        service = svc(request).synthesis
        plan = service.plan(body)
        timings = Timings("tts/stream", plan)
        cached = service.cached_pcm(plan)
        if cached is not None:
            timings.cache = "hit"
            timings.audio_bytes = len(cached)
            service.finish(timings, "ok")
            slices = (cached[i : i + STREAM_SLICE] for i in range(0, len(cached), STREAM_SLICE))
            return StreamingResponse(slices, media_type="application/octet-stream", headers=_headers(plan, "hit"))
        job = service.submit(plan, key, streaming=True, client=request.client.host if request.client else None)
        pieces = service.pcm_stream(plan, job, timings)
        # The first piece is awaited here so that a failure to load or start is a proper error status.
        first = await _until_disconnect(request, anext(pieces, b""))

        async def body_stream() -> AsyncIterator[bytes]:
            yield first
            async for pcm in pieces:
                yield pcm

        return StreamingResponse(body_stream(), media_type="application/octet-stream", headers=_headers(plan, "miss"))

    @app.get("/admin/scheduler", dependencies=[Depends(authorized)])
    async def scheduler_state(request: Request) -> dict[str, Any]:
        """The fair queue in detail: per engine and per key running, waiting, weight, used GPU time, rejections."""
        service = svc(request)
        return {"policy": dataclasses.asdict(service.scheduler.policy), **service.scheduler.stats()}

    @app.post("/model/unload", response_model=UnloadResult, dependencies=[Depends(authorized)])
    async def unload(request: Request, engine: str | None = None) -> UnloadResult:
        service = svc(request)
        if engine is not None and engine not in service.engines:
            raise InvalidInput(f"engine {engine!r} is not served by this node", code="engine_unavailable")
        return UnloadResult(unloaded=await service.gpu.run(service.manager.unload_now, engine))

    return app


def _bind(host: str, port: int, send_buffer: int = 0) -> socket.socket:
    """Bind the listening socket ourselves: uvicorn exits 0 on a port in use, which a supervisor reads as a stop."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and without it the last small
    # write of a response waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer:  # inherited by every accepted connection: bounds what a slow reader's connection absorbs
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SystemExit(
                f"polytts: port {port} on {host} is already in use; stop the other server or set POLYTTS_PORT"
            ) from None
        raise SystemExit(f"polytts: cannot bind {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after its graceful shutdown, so the process would die by the signal; a
    supervisor must see a clean stop as exit 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


def main() -> int:
    # Model libraries draw tqdm progress bars on stderr (VoxCPM, for every generation): noise in a server's log.
    # tqdm reads this when it is first imported, which happens later, when an engine loads.
    os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        settings = load_settings()
    except SettingsError as exc:
        sys.stderr.write(f"polytts: {exc}\n")
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        check_runtime(settings.runtime, settings.allow_cpu)
    except RuntimeRefused as exc:
        log.error("%s", exc)
        return 3
    sock = _bind(settings.host, settings.port, settings.send_buffer_bytes)
    config = uvicorn.Config(
        create_app(settings), log_level=settings.log_level, access_log=False, timeout_graceful_shutdown=10
    )
    server = _Server(config)
    log.info("binding http://%s:%d", settings.host, settings.port)
    server.run(sockets=[sock])
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
