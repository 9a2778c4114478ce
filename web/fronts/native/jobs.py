"""The job routes: `POST /jobs` (hours of speech made in the background), `GET /jobs` (the caller's), `GET
/jobs/{id}` (how far it is), `GET /jobs/{id}/events` (the same, as server-sent events), `GET /jobs/{id}/audio` (the
file, or one chapter, with HTTP Range) and `DELETE /jobs/{id}`. A job belongs to the key that made it, and to this
node (docs/fleet.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse

from errors import InvalidInput
from jobs.assembly import JOB_MEDIA_TYPES
from jobs.pieces import JobSpec
from lifecycle.requests import ENGINE_PARAMS
from web import api_docs
from web.auth import Identity
from web.dependencies import ServiceDep, get_identity, get_principal
from web.fronts.native.protocol import JobPage, JobRequest, JobStatus
from web.ranges import ranged_bytes, ranged_file

router = APIRouter(tags=["jobs"])
Principal = Annotated[str, Depends(get_principal)]
_BINARY = {"schema": {"type": "string", "format": "binary"}}
_AUDIO: api_docs.Responses = {
    status: {"description": description, "content": dict.fromkeys(JOB_MEDIA_TYPES.values(), _BINARY)}
    for status, description in (
        (200, "The job's file in its format (or one chapter's audio)."),
        (206, "The range of it that `Range` asked for (`Content-Range` says which)."),
    )
}


def _spec(body: Any) -> JobSpec:
    """The job as the jobs layer takes it; a body with both or neither of `text` and `chapters` is a 422."""
    if (body.text is None) == (body.chapters is None):
        raise InvalidInput("give either `text` or `chapters`", code="invalid_input")
    if body.timestamps:
        raise InvalidInput("a job's audio carries no word timings", code="timestamps_unsupported")
    chapters = [("", body.text)] if body.text is not None else [(c.title, c.text) for c in body.chapters]
    return JobSpec(
        chapters=chapters,
        format=body.format,
        voice_id=body.voice_id,
        language=body.language,
        max_chars_per_gen=body.max_chars_per_gen,
        max_sentences_per_gen=body.max_sentences_per_gen,
        params={name: value for name in ENGINE_PARAMS if (value := getattr(body, name, None)) is not None},
        webhook_url=body.webhook_url,
    )


@router.post("/jobs", status_code=202, responses=api_docs.errors(404, 413, 422, 429, 503, 507))
async def create_job(
    body: JobRequest,
    service: ServiceDep,
    identity: Annotated[Identity | None, Depends(get_identity)],
    principal: Principal,
) -> JobStatus:
    """Queue a job after validating all of it as `POST /tts` would; it is synthesized when the node has nothing
    more urgent, and resumes after a restart."""
    secret = identity.webhook_secret if identity is not None else ""
    record = await service.jobs.submit(_spec(body), principal, secret)
    return JobStatus.model_validate(service.jobs.status(record))


@router.get("/jobs")
async def list_jobs(
    service: ServiceDep,
    principal: Principal,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> JobPage:
    """The caller's jobs, newest first."""
    jobs, total = service.jobs.page(principal, offset, limit)
    return JobPage.model_validate({"jobs": jobs, "total": total, "offset": offset, "limit": limit})


@router.get("/jobs/{job_id}", responses=api_docs.errors(404))
async def get_job(job_id: str, service: ServiceDep, principal: Principal) -> JobStatus:
    return JobStatus.model_validate(service.jobs.status(service.jobs.owned(job_id, principal)))


@router.get(
    "/jobs/{job_id}/events",
    response_class=StreamingResponse,
    responses={
        **api_docs.event_stream(
            "A `progress` event per change, its data the job's status.",
            ["progress"],
            {"$ref": "#/components/schemas/JobStatus"},
        ),
        **api_docs.errors(404),
    },
)
async def job_events(job_id: str, service: ServiceDep, principal: Principal) -> StreamingResponse:
    """Server-sent events: `progress` with the job's status each time it changes, until it ends."""
    service.jobs.owned(job_id, principal)

    async def events() -> AsyncIterator[bytes]:
        async for status in service.jobs.events(job_id, principal):
            yield b": keep-alive\n\n" if status is None else f"event: progress\ndata: {json.dumps(status)}\n\n".encode()

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.get("/jobs/{job_id}/audio", response_class=Response, responses={**_AUDIO, **api_docs.errors(404, 409, 416)})
async def job_audio(
    job_id: str,
    request: Request,
    service: ServiceDep,
    principal: Principal,
    chapter: Annotated[int | None, Query(ge=0, description="One chapter's audio, by index from 0.")] = None,
) -> Response:
    """The finished file (chapter marks in m4a and m4b), or one chapter's audio; `Range` is honoured."""
    record = service.jobs.owned(job_id, principal)
    media_type = JOB_MEDIA_TYPES[record.format]
    asked = request.headers.get("range")
    if chapter is not None:
        return ranged_bytes(await service.jobs.chapter_audio(record, chapter), asked, media_type)
    path, size = service.jobs.audio(record)
    return ranged_file(path, size, asked, media_type)


@router.delete("/jobs/{job_id}", status_code=204, responses=api_docs.errors(404))
async def delete_job(job_id: str, service: ServiceDep, principal: Principal) -> Response:
    """Cancel the job if it runs, then remove it and its files."""
    await service.jobs.delete(job_id, principal)
    return Response(status_code=204)
