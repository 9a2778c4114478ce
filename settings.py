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
from gpu.scheduling_settings import SchedulingSettings
from jobs.job_settings import JobSettings

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
    """The service's own knobs; the fair queue (`SchedulingSettings`) and each engine family (`EngineSpec.settings`)
    add their own in `Settings`."""

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

    request_timeout_s: float = Field(600.0, ge=0)
    """A synthesis still running after this long is dropped before its next step (504); 0 means no limit."""

    send_buffer_bytes: int = Field(131_072, ge=0, le=64 * 1024 * 1024)
    """Kernel send buffer of each client connection (SO_SNDBUF; Linux doubles it). It bounds the audio a slow
    reader's connection absorbs before its response stops taking audio, so it is found behind real time after a few
    seconds of audio, not ~60 s (the autotuned default holds up to 4 MB). 0 leaves the kernel's autotuning."""

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

    # --- pronunciation lexicons ---

    lexicons_dir: Path = PROJECT_ROOT / "lexicons-store"
    """Folder of stored pronunciation lexicons, one `<lexicon_id>.json` each. Loaded as is at start."""

    max_lexicon_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Largest lexicon document (PLS or JSON rules) `POST /lexicons` takes; larger is a 413 `lexicon_too_large`,
    answered before the document is parsed."""

    max_lexicon_entries: int = Field(20_000, ge=1, le=1_000_000)
    """Most entries one lexicon may hold; more is a 413 `lexicon_too_large`."""

    max_lexicons_per_request: int = Field(8, ge=1, le=64)
    """Most lexicons one request may name (its own and the defaults together); more is a 422 `too_many_lexicons`."""

    default_lexicons: Annotated[list[str], NoDecode] = []
    """Lexicon ids applied to every request on this node (a JSON list or comma-separated), before a request's own
    (a request's own come first, and the first lexicon that says a word wins)."""

    key_lexicons: dict[str, list[str]] = {}
    """Lexicon ids applied to every request of an API key, by the key's name (JSON `{"<name>": ["<id>", ...]}`),
    after the request's own and before the node's (POLYTTS_DEFAULT_LEXICONS)."""

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

    @field_validator("default_lexicons", mode="before")
    @classmethod
    def _lexicon_list(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            return (
                json.loads(text) if text.startswith("[") else [item.strip() for item in text.split(",") if item.strip()]
            )
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
class Settings(
    ServiceSettings,
    SchedulingSettings,
    JobSettings,
    *(spec.settings for spec in ENGINE_SPECS),  # type: ignore[misc]
):
    """Every field maps onto the environment variable `POLYTTS_<FIELD>` (case-insensitive): the service's own
    (`ServiceSettings`), the fair queue's (`SchedulingSettings`), the jobs' (`JobSettings`) and each engine
    family's."""


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
