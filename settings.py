"""All of the service's knobs: one pydantic-settings class, read from `POLYTTS_*` environment variables."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from engines import ENGINE_SPECS
from engines.base import ENV_PREFIX, EngineContext, EngineSettings

PROJECT_ROOT = Path(__file__).resolve().parent


class _Environment(EnvSettingsSource):
    """The environment as pydantic-settings reads it, except that a JSON value that does not parse is validated as
    the text it is: validation then names its variable and the form it expects, beside every other invalid one,
    where pydantic-settings raises at the first with a traceback."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError:
            return value


class ServiceSettings(EngineSettings):
    """The service's own knobs; each engine family adds its own (`EngineSpec.settings`) in `Settings`."""

    # A field read under an old variable name too (an alias) is still set by its own name in code.
    model_config = SettingsConfigDict(validate_by_name=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _Environment(settings_cls), dotenv_settings, file_secret_settings

    host: str = "127.0.0.1"
    """Interface to bind. Keep loopback unless a proxy or broker on another host must reach the node."""

    port: int = Field(8100, ge=1, le=65535)
    """TCP port to serve HTTP on."""

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Logging level of the `polytts` loggers and uvicorn."""

    voices_dir: Path = PROJECT_ROOT / "voices"
    """Folder of registered voices, one `<voice_id>/` folder each. Loaded as is at start."""

    models_dir: Path = PROJECT_ROOT / "models"
    """Folder where run-time weights are assembled (never committed)."""

    cache_dir: Path = PROJECT_ROOT / "cache"
    """Folder of the disk PCM cache (`<cache_dir>/pcm`)."""

    default_engine: Literal["kokoro"] = "kokoro"
    """Engine loaded at start (bind first, warm after) and used when a request names no voice."""

    default_voice: str = "af_heart"
    """Voice used when a request names none: a built-in Kokoro voice, a blend or a registered voice id."""

    default_residency: Literal["HARD_PIN", "SOFT_PIN", "UNPINNED"] = "SOFT_PIN"
    """Residency of the default engine. HARD_PIN never idles out; SOFT_PIN and UNPINNED do."""

    idle_evict_seconds: float = Field(300.0, gt=0)
    """Seconds without use after which a resident engine that is not HARD_PIN is unloaded."""

    coload: bool = False
    """Allow more than one engine in device memory at a time (otherwise loading one evicts the others)."""

    runtime: Literal["auto", "cuda", "mps", "cpu", "mlx"] = "auto"
    """Where models run. `cuda`/`mps` is a demand: the server refuses to start when torch cannot see that device
    (unless POLYTTS_ALLOW_CPU). `mlx` runs every engine through mlx-audio (refused when it is not installed).
    `auto` picks MLX on Apple Silicon when mlx-audio is installed, else CUDA or MPS when torch sees one, else the
    CPU."""

    allow_cpu: bool = False
    """Start on the CPU even though POLYTTS_RUNTIME asked for a GPU that torch cannot see."""

    mlx_cache_mb: int = Field(1024, ge=0)
    """MLX runtime: limit of the Metal allocator's buffer cache, in MiB (memory is also cleared after each request)."""

    max_voices_mem: int = Field(32, ge=1)
    """Prepared voices (speaker embeddings, reference codes) kept in memory per engine; least recently used out.
    They are also persisted under voices/<id>/prompts/<model-key>/."""

    stream_interval: float = Field(0.5, gt=0, le=10)
    """Seconds of audio per streamed piece for engines that stream inside one generation (Qwen3-TTS on MLX)."""

    max_text_chars: int = Field(5000, ge=1, le=1_000_000)
    """Longest text one synthesis request may carry, as written; longer is a 413 `text_too_long`."""

    max_spoken_chars: int = Field(10_000, ge=1, le=2_000_000)
    """Longest text one synthesis request may carry as spoken, once the engine has rewritten it (numbers, money and
    dates read out as words; runs of a script the voice's language cannot read skipped); longer is a 413
    `spoken_too_long`. It bounds the work (about 15 spoken characters a second of audio) where the written limit
    cannot: 5,000 characters of money amounts are 38,749 spoken. Ordinary text is 1.0-1.3 times longer as spoken,
    so at twice POLYTTS_MAX_TEXT_CHARS this limit refuses only text that multiplies."""

    first_chunk_chars: int = Field(60, ge=10, le=2000)
    """Cap on the first text chunk of a request, kept short so the first audio arrives early."""

    chunk_chars: int = Field(120, ge=20, le=2000)
    """Cap on every later text chunk (one model call, and one step of the GPU thread, each), in characters as spoken
    (numbers read out as words): a request arriving while a long one runs waits at most for the step under way."""

    max_inflight: int = Field(16, ge=1, le=10_000)
    """Synthesis requests admitted at once (running or waiting for the GPU thread); more is a 429 `server_busy`."""

    max_queued_chars: int = Field(20_000, ge=1)
    """Characters of text admitted but not yet started, across all requests; more is a 429 `server_busy`."""

    api_keys: dict[str, str] = {}
    """API keys as JSON `{"<secret>": "<name>"}`. When set (or admin keys are), every route but /health, /ready,
    /metrics and the docs needs `Authorization: Bearer <secret>`, and the key's name is the request's fairness key."""

    admin_keys: dict[str, str] = {}
    """Admin keys as JSON `{"<secret>": "<name>"}`: they work wherever an API key does, and only they may use the
    admin routes (/admin/..., /model/unload) once any key is configured; an ordinary key gets 403 there."""

    live_flush_ms: int = Field(600, ge=50, le=60_000)
    """Live requests: a partial phrase pending this long with no new text (the producer paused) is spoken anyway."""

    live_idle_timeout_s: float = Field(60.0, gt=0, le=3600)
    """Live requests: one that sends no speakable text for this long ends with `live_idle_timeout` (messages with
    no text to speak, such as keep-alives, do not count)."""

    max_idle_live: int = Field(128, ge=1)
    """Live requests that may wait for text at once, in all; another is a 429 `live_sessions_full`. A live request
    waiting for text holds no admission place of POLYTTS_MAX_INFLIGHT or POLYTTS_MAX_PENDING_PER_KEY."""

    max_idle_live_per_client: int = Field(8, ge=1)
    """Live requests one client address may have waiting for text at once; another is a 429 `live_sessions_full`."""

    public_inventory: bool = False
    """With keys configured, publish the voice inventory in the public (keyless) view of /health too, for a broker
    or balancer that places work by voice without a key."""

    openai_voices: dict[str, str] = {}
    """OpenAI voice names for `/v1/audio/speech` as JSON `{"alloy": "af_heart", "narrator": "<voice id>"}`: each
    replaces a default mapping (docs/api.md) or adds a name."""

    drain_seconds: float = Field(30.0, ge=0)
    """On SIGTERM the node drains: /ready answers 503, new syntheses 503 `draining`, running ones finish; after this
    long whatever still runs is cut (and logged) and the process exits 0."""

    peers: Annotated[list[str], NoDecode] = []
    """Base URLs of other nodes (a JSON list or comma-separated). A request for a voice id unknown here asks them for
    its bundle (GET /voices/{id}/bundle), verifies it by its id, stores it and serves the request."""

    peer_api_key: str = ""
    """The key sent to peers (Authorization: Bearer) when they require one."""

    peer_timeout_s: float = Field(3.0, gt=0, le=60)
    """Timeout of each call to a peer; an unreachable peer costs at most this, never a hang."""

    host_id: str = Field(default_factory=socket.gethostname)
    """This node's name in a livestack fleet (passed to `livestack_node.attach`)."""

    fairness_default_weight: float = Field(1.0, gt=0)
    """Share of GPU time of a fairness key that `fairness_weights` does not name."""

    fairness_weights: dict[str, float] = {}
    """Weights per fairness key as JSON, e.g. `{"interactive": 2, "batch": 1}`; only configuration grants weight."""

    idle_state_ttl_s: float = Field(300.0, gt=0)
    """A key's used GPU time is forgotten once it has been idle this long."""

    max_pending_per_key: int = Field(8, ge=1)
    """Requests one fairness key may have admitted at once; more is a 429 `fairness_key_queue_full`. The anonymous
    key (requests that name none, on a node without API keys) is shared by unrelated clients: there this many per
    client address."""

    max_pending_per_engine: int = Field(32, ge=1)
    """Requests one engine may have admitted at once; more is a 429 `engine_queue_full`."""

    engine_switch_max_wait_s: float = Field(5.0, ge=0)
    """While one engine is resident it keeps the GPU thread as long as it has work, until another engine's oldest
    request has waited this long; then the thread switches (one load) to serve it."""

    max_buffered_pieces: int = Field(8, ge=1)
    """Audio pieces a response may have waiting to be sent; a slower reader gets no new steps until it catches up."""

    request_timeout_s: float = Field(600.0, ge=0)
    """A synthesis still running after this long is dropped before its next step (504); 0 means no limit."""

    # --- real-time streams and slow readers (gpu.fairness.FairnessPolicy) ---
    stream_admission: bool = True
    """Refuse a new stream (429 `stream_capacity_full`) that the GPU thread could not keep in real time next to the
    admitted ones. Off: streams are admitted by the count bounds only, and run dry under load."""

    stream_gpu_share: float = Field(0.8, gt=0, le=1)
    """Admission plans streams with this share of the GPU thread, from the engine's measured speed and the audio
    promised to admitted streams; the rest absorbs misestimates and whole-file work."""

    short_step_s: float = Field(0.8, ge=0)
    """A stream ahead of its listener takes a step of about this long (its chunk cut after a clause, never inside a
    phrase) instead of its whole chunk, since a request arriving meanwhile waits for it: a newcomer's first step then
    waits about this long at most. Whole chunks again when the listener holds less than one such step. 0 never cuts a
    step short."""

    stream_max_start_wait_s: float = Field(5.0, gt=0)
    """A new stream whose first step would start this long after the step under way, behind other streams' first
    steps, is a 429 `stream_capacity_full`. Running streams keep this much audio in hand beyond their next step
    before whole-file work goes first."""

    slow_reader_lag_s: float = Field(10.0, gt=0)
    """A streamed response whose reader is this far behind real time (audio waiting for it) stops holding an
    admission slot; it gets its next step once it has taken what waits."""

    reader_idle_limit_s: float = Field(60.0, gt=0)
    """A response whose reader took no audio for this long while audio waited is dropped (logged); its waiting
    audio is freed."""

    send_buffer_bytes: int = Field(131_072, ge=0, le=64 * 1024 * 1024)
    """Kernel send buffer of each client connection (SO_SNDBUF; Linux doubles it). It bounds the audio a slow
    reader's connection absorbs before its response stops taking audio, so it is found behind real time after a few
    seconds of audio, not ~60 s (the autotuned default holds up to 4 MB). 0 leaves the kernel's autotuning."""

    max_client_share: float = Field(0.5, gt=0, le=1)
    """Share of POLYTTS_MAX_INFLIGHT one client address may hold (at least one); more is a 429
    `client_queue_full`. Behind a proxy the address is the one in X-Forwarded-For when the proxy is trusted
    (uvicorn trusts 127.0.0.1; another address is named in the FORWARDED_ALLOW_IPS environment variable, as
    deploy/haproxy.cfg says); an untrusted proxy gives every client its own address: raise this to 1 there."""

    max_tracked_keys: int = Field(256, ge=1)
    """Idle fairness keys whose used GPU time is remembered; beyond it the longest idle are forgotten. Rejected
    requests never create a key's state."""

    max_key_labels: int = Field(32, ge=1)
    """Fairness keys listed one by one in /health, /admin/scheduler and /metrics (busiest first); the rest are
    summed under the key `(other)`."""

    retry_after_seconds: float = Field(2.0, gt=0)
    """`Retry-After` of 503 answers (warming, draining, uploads busy). A 429 computes its own from the work ahead
    of it (when the first request holding its bound should end, one slot per refusal after that), and takes this
    only where that work cannot be estimated (live requests waiting for text)."""

    memory_cache_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        # Aliases are environment names as they are (no prefix added); the first is the one errors name.
        validation_alias=AliasChoices(f"{ENV_PREFIX}MEMORY_CACHE_BYTES", f"{ENV_PREFIX}WAV_CACHE_BYTES"),
    )
    """Bound on the in-memory LRU of finished audio (PCM); 0 turns it off. Its old name, POLYTTS_WAV_CACHE_BYTES, is
    read too (the new one wins when both are set)."""

    pcm_cache_bytes: int = Field(512 * 1024 * 1024, ge=0)
    """Bound on the disk cache of finished PCM; 0 turns it off."""

    max_upload_bytes: int = Field(12_582_912, ge=1024)
    """Largest audio file (reference clip or seed clip) a voice registration may upload; larger is a 413."""

    voice_min_seconds: float = Field(0.5, gt=0)
    """Shortest reference or seed clip accepted at registration."""

    voice_max_seconds: float = Field(60.0, gt=0)
    """Longest reference or seed clip accepted at registration."""

    warm_on_start: bool = True
    """Load the default engine right after binding. Off: it loads on the first request."""

    # --- hostile clients: memory held by uploads ---

    upload_budget_bytes: int = Field(64 * 1024 * 1024, ge=0)
    """Bytes of `POST /voices` bodies that all uploads together may hold in memory at once; an upload that would pass
    it is refused with 503 `uploads_busy` and `Retry-After` before its body is read. One upload alone is always
    admitted (up to its own size limit), so a budget below the largest upload only serialises them."""

    @field_validator("peers", mode="before")
    @classmethod
    def _peer_list(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if not text.startswith("["):
                return [url.strip() for url in text.split(",") if url.strip()]
            try:
                return json.loads(text)
            except ValueError:
                raise ValueError("expected a JSON list of base URLs, or base URLs separated by commas") from None
        return value

    @field_validator("peers")
    @classmethod
    def _peer_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"peer {url!r} is not an http(s) base URL")
        return value

    @field_validator("openai_voices")
    @classmethod
    def _voice_names(cls, value: dict[str, str]) -> dict[str, str]:
        if any(not name.strip() or not voice.strip() for name, voice in value.items()):
            raise ValueError("every OpenAI voice name and the voice it maps to must be non-empty")
        return value

    @model_validator(mode="after")
    def _check_relations(self) -> ServiceSettings:
        if any(not weight > 0 for weight in self.fairness_weights.values()):
            raise ValueError("every weight in POLYTTS_FAIRNESS_WEIGHTS must be above 0")
        if self.voice_min_seconds >= self.voice_max_seconds:
            raise ValueError("POLYTTS_VOICE_MIN_SECONDS must be below POLYTTS_VOICE_MAX_SECONDS")
        if self.first_chunk_chars > self.chunk_chars:
            raise ValueError("POLYTTS_FIRST_CHUNK_CHARS must not exceed POLYTTS_CHUNK_CHARS")
        return self

    def engine_context(self) -> EngineContext:
        """What every engine's build reads of these settings, beside its own family's."""
        return EngineContext(
            runtime=self.runtime,
            models_dir=self.models_dir,
            max_voices_mem=self.max_voices_mem,
            mlx_cache_mb=self.mlx_cache_mb,
            stream_interval=self.stream_interval,
            first_chunk_chars=self.first_chunk_chars,
            chunk_chars=self.chunk_chars,
        )


# The engine families' settings classes are bases computed at import time, which a type checker cannot follow.
class Settings(ServiceSettings, *(spec.settings for spec in ENGINE_SPECS)):  # type: ignore[misc]
    """Every field maps onto the environment variable `POLYTTS_<FIELD>` (case-insensitive)."""


class SettingsError(Exception):
    """Invalid configuration; the message names each offending environment variable."""


SECRET_FIELDS = frozenset({"api_keys", "admin_keys", "peer_api_key"})
"""Settings whose values an error message never repeats: they hold keys, and a configuration error ends in a log."""


def _json_form(annotation: Any) -> str:
    """The JSON an object- or list-valued setting takes, from its type: `dict[str, float]` is an object of numbers."""
    args = get_args(annotation)
    sample = {float: "1.5", int: "1", bool: "true"}.get(args[-1] if args else str, '"value"')
    if get_origin(annotation) is dict:
        return f'a JSON object such as {{"key": {sample}}}'
    return f"a JSON list such as [{sample}]"


def _problem(error: ErrorDetails) -> str:
    """One invalid variable: its name, what it expects, and what it holds (unless that is a secret)."""
    message = error["msg"].removeprefix("Value error, ")
    if not error["loc"]:  # a rule relating settings: its message names them
        return message
    field = str(error["loc"][0])
    name = ENV_PREFIX + field.upper().removeprefix(ENV_PREFIX)
    info = Settings.model_fields.get(field)
    if error["type"] in ("dict_type", "list_type") and info is not None:
        message = f"expected {_json_form(info.annotation)}"
    if field in SECRET_FIELDS:  # a key inside it is a secret too
        return f"{name}: {message}"
    name += "".join(f"[{json.dumps(part)}]" for part in error["loc"][1:])  # inside an object- or list-valued one
    return f"{name}: {message} (got {error.get('input')!r})"


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (plus explicit overrides) or raise SettingsError naming the bad variables."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError("invalid configuration: " + "; ".join(_problem(error) for error in exc.errors())) from exc
    except SourceError as exc:  # a variable pydantic-settings could not read at all; its message names the field
        raise SettingsError(f"invalid configuration: {exc}") from exc


def settings_or_report() -> Settings | None:
    """The settings from the environment, or None once each invalid variable is named on stderr (the caller then
    exits 2): what `server.py` and `python -m settings` both say of a bad configuration."""
    try:
        return load_settings()
    except SettingsError as exc:
        sys.stderr.write(f"polytts: {exc}\n")
        return None


def main() -> int:
    """`python -m settings`: check the configuration alone, as ./run.sh does before it sets anything up."""
    return 0 if settings_or_report() is not None else 2


if __name__ == "__main__":
    sys.exit(main())
