"""Request and response models of the node's own routes beside the fronts: voice registration, readiness, health
and the admin routes (web/routes/)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from engines import FAMILIES
from gpu.engine_pool import EngineStatus
from voicebank.registration import MAX_REF_TEXT_CHARS


# Documentation only: the route reads the form part by part as it arrives (routes.voices.registration_from_form).
class VoiceForm(BaseModel):
    """The multipart form of `POST /voices`: a reference clip (`audio`) and its engine, or a Kokoro `voice_pack`."""

    audio: bytes | None = Field(
        None,
        description="Reference clip, any format libsndfile decodes, 0.5-60 s, at most POLYTTS_MAX_UPLOAD_BYTES; "
        "a file part. One of audio or voice_pack is required.",
    )
    voice_pack: bytes | None = Field(
        None,
        description="Kokoro only, instead of audio: one float tensor of shape (510, 1, 256) as .pt, .npy, "
        ".npz or .safetensors; a file part.",
    )
    # A Literal of the families' names, built at import time: pydantic reads it, a type checker cannot.
    engine: Literal[tuple(FAMILIES)] = Field(  # type: ignore[valid-type]
        description="The engine the voice is for (kokoro takes a voice_pack, the others a clip)."
    )
    ref_text: str | None = Field(
        None, max_length=MAX_REF_TEXT_CHARS, description="The clip's transcript; required unless x_vector_only_mode."
    )
    x_vector_only_mode: bool = Field(False, description="Clone timbre only: no transcript needed.")
    seed_audio: bytes | None = Field(None, description="An optional tone seed clip (a file part).")
    seed_text: str | None = Field(None, description="The seed clip's text; required with seed_audio.")
    replace: bool = Field(False, description="Replace the transcript of a voice already registered under this id.")
    language: str | None = Field(
        None,
        description="The language the voice speaks (ISO code, locale or English name); a request that names "
        "none follows it.",
    )


NodeStatus = Literal["ready", "warming", "failed", "draining"]
"""Whether the node takes work: that of its default engine, or draining before a stop."""


class ReadyState(BaseModel):
    status: NodeStatus
    reason: str | None = Field(
        None, description="Why not ready; left out for a caller without a key on a node with keys."
    )


class VoiceCreated(BaseModel):
    voice_id: str
    created: bool
    """False when the same registration already existed and nothing was written."""


class UnloadResult(BaseModel):
    unloaded: list[str]


# -- GET /health: returned as built (lifecycle.service), these models document it ---------------------------------


class EngineHealth(BaseModel):
    """One engine as `/health` shows it to a caller with a key: its family's own description (backend, device,
    checkpoint, memory, ...), then its state."""

    state: EngineStatus
    reason: str | None = Field(description="Why it failed to load, if it did.")


class ResidentEngine(BaseModel):
    engine: str
    checkpoint: str | None


class FleetState(BaseModel):
    attached: bool = Field(description="Whether a fleet broker manages this node.")
    residency: str = Field(description="Who decides which engines stay in device memory: `local`, or the fleet.")


class HealthLimits(BaseModel):
    max_inflight: int
    max_queued_chars: int
    max_text_chars: int
    max_upload_bytes: int


class Inventory(BaseModel):
    voice: list[str] = Field(description="Registered voices of engines this node runs, then every built-in voice.")
    job: list[str] = Field(
        [], description="Ids of the jobs this node holds (a job belongs to the node that took it: docs/fleet.md)."
    )


class VoiceCounts(BaseModel):
    registered: int
    by_engine: dict[str, int]
    ids: list[str]
    builtin: list[str]


class CacheStats(BaseModel):
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int


class CacheLayers(BaseModel):
    wav: CacheStats = Field(description="The in-memory cache (POLYTTS_MEMORY_CACHE_BYTES).")
    pcm: CacheStats = Field(description="The disk cache (POLYTTS_PCM_CACHE_BYTES).")


class Health(BaseModel):
    """`GET /health` for a caller with a key, or on a node without keys."""

    status: NodeStatus
    reason: str | None = Field(description="Why the node is not ready, if it is not.")
    pid: int
    uptime_s: float
    device: str = Field(description="Where the default engine runs.")
    default_engine: str
    runtime: str
    serves: list[str] = Field(description="The engines this node runs.")
    engines: dict[str, EngineHealth]
    resident: list[ResidentEngine] = Field(description="The engines in device memory now.")
    manager: dict[str, Any] = Field(description="The residency manager's state: its policy and each engine's loads.")
    fleet: FleetState
    inflight: dict[str, Any] = Field(
        description="The fair queue: syntheses running and waiting, rejections, real-time streams, per engine and key."
    )
    limits: HealthLimits
    inventory: Inventory
    voices: VoiceCounts
    caches: CacheLayers


class PublicEngine(BaseModel):
    state: EngineStatus


class PublicLoad(BaseModel):
    running: int
    waiting: int
    in_flight: int = Field(description="Requests admitted or served from a cache, not ended yet.")


class PublicHealth(BaseModel):
    """`GET /health` for a caller without a key on a node with keys: what a balancer or a broker needs."""

    status: NodeStatus
    engines: dict[str, PublicEngine]
    load: PublicLoad
    inventory: Inventory | None = Field(None, description="Only where POLYTTS_PUBLIC_INVENTORY publishes it.")


# -- pronunciation lexicons (web/routes/lexicons.py) -------------------------------------------------------------


class LexiconCreated(BaseModel):
    lexicon_id: str = Field(description="The hash of its content: the same lexicon has the same id on every node.")
    created: bool
    """False when it was stored already and nothing was written."""
    entries: int


class LexiconSummary(BaseModel):
    lexicon_id: str
    name: str
    language: str | None = Field(description="BCP 47: its entries serve that language (any region); null: every one.")
    entries: int
    phoneme_entries: int = Field(description="Entries said by phonemes (Kokoro voices only), the rest by aliases.")


class LexiconEntry(BaseModel):
    graphemes: list[str]
    alias: str | None = None
    phoneme: str | None = Field(None, description="In Kokoro's symbols, converted from the alphabet uploaded.")
    alphabet: str | None = None


class LexiconDescription(LexiconSummary):
    lexemes: list[LexiconEntry]


class LexiconList(BaseModel):
    lexicons: list[LexiconSummary]
