"""The fair queue's knobs, declared once: its `POLYTTS_*` settings, which `settings.Settings` composes beside the
service's own and each engine family's, and which the fair queue (`gpu.fairness.FairQueue`) takes whole."""

from __future__ import annotations

from pydantic import Field, model_validator

from engines.base import EngineSettings


class SchedulingSettings(EngineSettings):
    """How the GPU thread is shared: fairness weights, admission bounds, stream admission and slow readers
    (docs/scheduling.md)."""

    # --- admission bounds ---
    max_inflight: int = Field(16, ge=1, le=10_000)
    """Synthesis requests admitted at once (running or waiting for the GPU thread); more is a 429 `server_busy`."""

    max_queued_chars: int = Field(20_000, ge=1)
    """Characters of text admitted but not yet started, across all requests; more is a 429 `server_busy`."""

    max_idle_live: int = Field(128, ge=1)
    """Live requests that may wait for text at once, in all; another is a 429 `live_sessions_full`. A live request
    waiting for text holds no admission place of POLYTTS_MAX_INFLIGHT or POLYTTS_MAX_PENDING_PER_KEY."""

    max_idle_live_per_client: int = Field(8, ge=1)
    """Live requests one client address may have waiting for text at once; another is a 429 `live_sessions_full`."""

    # --- fairness between keys and engines ---
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

    # --- real-time streams and slow readers ---
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

    stream_yield_s: float = Field(1.0, ge=0)
    """A stream ahead of its listener stops its step under way (on engines whose stop costs their next step nothing:
    Kokoro on ONNX Runtime or OpenVINO) for a newcomer's first step, while its listener holds that step and this
    much more audio; it says its step again after, cut at a word gap if no clause ends before its listener would run
    dry. So a newcomer's wait does not depend on the clause lengths of the streams playing. 0: a newcomer waits for
    the step under way."""

    short_step_word_cuts: bool = False
    """A short step whose text opens with a clause longer than the step is cut inside that clause, at a word gap
    where a speaker could pause (never right after an article or a preposition, never inside a number read out), so
    a newcomer's wait does not grow with the clause lengths of the streams ahead. Off by default: measured, the cuts
    cost 16 % more synthesis in the worst case (every generation pays the model's padding) and Whisper hears a phrase
    boundary at some seams between content words (docs/benchmarks.md); off, a short step is cut only after a clause,
    and a newcomer waits for the whole clause under way."""

    background_step_chars: int = Field(0, ge=0)
    """A background job's step (jobs/) is cut after its leading clauses within this many characters (never inside a
    clause, unless POLYTTS_SHORT_STEP_WORD_CUTS), for engines that cannot stop a step under way cheaply (PyTorch,
    MLX): an interactive request arriving meanwhile waits for it. Kokoro on ONNX Runtime or OpenVINO stops the job's
    step for the arrival instead, so 0 (whole chunks) is the default: measured, 60-character steps made a job about
    10 % slower. Counted in characters, not from measured speed, so that a job's audio never depends on how fast the
    node ran (a job resumed after a restart ends with the PCM of an uninterrupted run)."""

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

    # --- clients, keys and retries ---
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

    max_retry_after_s: float = Field(30.0, ge=1)
    """The longest `Retry-After` of a 429. A client refused for longer holds a place in line and is told to come back
    within this, then told the time left to its place again; clients refused before it that never come back stop
    holding places ahead of it after this plus POLYTTS_RETRY_GRACE_S, so it is never told to wait longer for them."""

    retry_grace_s: float = Field(5.0, ge=0)
    """How late after its `Retry-After` a refused client may come back and keep its place in line (`Retry-After` is
    whole seconds, and a request takes time to arrive); later, its place lapses and the places behind it move up."""

    retry_after_seconds: float = Field(2.0, gt=0)
    """`Retry-After` of 503 answers (warming, draining, uploads busy). A 429 computes its own from the work ahead
    of it (when the first request holding its bound should end, one slot per refused client ahead of it in line,
    within POLYTTS_MAX_RETRY_AFTER_S), and takes this only where that work cannot be estimated (live requests waiting
    for text)."""

    # Named apart from the other settings classes' validators: `Settings` inherits every one of them.
    @model_validator(mode="after")
    def _check_weights(self) -> SchedulingSettings:
        if any(not weight > 0 for weight in self.fairness_weights.values()):
            raise ValueError("every weight in POLYTTS_FAIRNESS_WEIGHTS must be above 0")
        return self

    def weight(self, key: str) -> float:
        """A fairness key's weight: its own, or the default."""
        return self.fairness_weights.get(key, self.fairness_default_weight)

    @property
    def max_per_client(self) -> int:
        """Admitted requests one client address may hold: its share of `max_inflight`, at least one."""
        return max(1, int(self.max_client_share * self.max_inflight))
