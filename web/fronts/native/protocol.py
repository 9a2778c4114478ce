"""Answers of the native speech API beside its audio: the timed answer of `POST /tts` and what `GET /engines`
says of each engine; and the jobs' body and answers. Its speech requests are the service's own
(web/fronts/shared/requests.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from audio.encoding import AudioFormat
from gpu.engine_pool import EngineStatus
from jobs.assembly import JobFormat
from web.fronts.shared.requests import TTSRequest


class WordTimingView(BaseModel):
    word: str
    start: float = Field(description="Seconds from the start of the audio.")
    end: float


class TimedSpeech(BaseModel):
    """`POST /tts` with `timestamps`: the audio and when each word is spoken."""

    audio: str = Field(description="The audio in `format`, base64.", json_schema_extra={"contentEncoding": "base64"})
    format: AudioFormat
    sample_rate: int
    words: list[WordTimingView]


class EngineDescription(BaseModel):
    """One engine this node runs, as `GET /engines` describes it."""

    name: str
    state: EngineStatus
    sample_rate: int = Field(description="The sample rate of its audio, in Hz.")
    clone: bool = Field(description="Whether it clones a voice from a registered clip.")
    packs: bool = Field(description="Whether it takes uploaded voice packs.")
    live: bool = Field(description="Whether it speaks on the live routes (`/tts/live`, `/tts/live/ws`).")
    parameters: dict[str, Any] = Field(
        description="JSON schema of its per-request parameters: each one's type, range, default and description."
    )


class LanguageDescription(BaseModel):
    code: str = Field(description="The canonical code, e.g. 'en-gb'; a request may also use an alias or the name.")
    name: str = Field(description="The language in English, e.g. 'British English'.")


class EngineCatalog(BaseModel):
    """`GET /engines`: what this node's engines take, and the languages a request may name."""

    engines: list[EngineDescription]
    languages: list[LanguageDescription]


class ChapterText(BaseModel):
    """One chapter of a job."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field("", max_length=200, description="Its title: the chapter mark's name in m4a and m4b.")
    text: str = Field(description="Its text.")


JobRequest = create_model(
    "JobRequest",
    __base__=TTSRequest,
    __doc__="Body of `POST /jobs`: a text or chapters, a format, and every option of `POST /tts`.",
    text=(
        str | None,
        Field(None, description="The whole text (one chapter); or give `chapters`. POLYTTS_MAX_JOB_CHARS at most."),
    ),
    chapters=(
        list[ChapterText] | None,
        Field(None, min_length=1, description="The chapters, in order; or give `text`."),
    ),
    format=(
        JobFormat,
        Field("mp3", description="The finished file's format; m4a and m4b (AAC) carry a chapter mark per chapter."),
    ),
    webhook_url=(
        str | None,
        Field(
            None,
            max_length=2000,
            pattern=r"^https?://",
            description="Called (POST, JSON, signed: docs/api.md) once the job ends, done or not.",
        ),
    ),
)


class ChapterStatus(BaseModel):
    index: int
    title: str
    done: bool
    audio_seconds: float


class WebhookStatus(BaseModel):
    """Where a job's webhook call stands."""

    state: Literal["pending", "delivered", "failed"] = Field(
        description="`pending` until a call answers 2xx (`delivered`) or every attempt has failed (`failed`)."
    )
    attempts: int = Field(description="Calls made so far.")
    last_status: int | None = Field(description="The HTTP status of the last call (None if it got no answer).")
    last_error: str | None = Field(description="What went wrong with the last call, when it failed.")
    last_attempt_at: float | None
    next_attempt_at: float | None = Field(
        description="When the next call is due (None while the job runs and once delivered or failed)."
    )


class JobStatus(BaseModel):
    """`GET /jobs/{id}`: how far a job is."""

    job_id: str
    state: Literal["queued", "running", "done", "failed", "cancelled"]
    node: str = Field(description="The node that holds the job (POLYTTS_HOST_ID): every call about it goes there.")
    format: JobFormat
    chars_total: int
    chars_done: int
    chapters_total: int
    chapters_done: int
    pieces_total: int
    pieces_done: int
    audio_seconds: float = Field(description="Audio made so far.")
    eta_s: float | None = Field(description="Seconds until it is done, from the measured speed (None until measured).")
    chapters: list[ChapterStatus]
    error: str | None
    created_at: float
    ended_at: float | None
    webhook: WebhookStatus | None = Field(description="The webhook call's state; None without `webhook_url`.")


class JobPage(BaseModel):
    """`GET /jobs`: a page of the caller's jobs, newest first."""

    jobs: list[JobStatus]
    total: int
    offset: int
    limit: int
