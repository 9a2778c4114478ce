"""Voice registration and listing: `POST /voices`, `GET /voices`, `GET /voices/{name}`, `DELETE /voices/{id}`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from engines import FAMILIES
from errors import ClientDisconnected, Conflict, InvalidInput
from text.languages import LANGUAGES
from voicebank import bundles
from voicebank.ids import VOICE_ID_RE, check_voice_id
from voicebank.registration import Registration
from voicebank.uploads import FormPart, read_body, read_form
from voicebank.voice_entry import excerpt
from web import api_docs
from web.dependencies import ServiceDep
from web.protocol import VoiceCreated, VoiceForm

router = APIRouter(tags=["voices"])

VoiceName = Annotated[str, Path(description="A registered voice id, or the name of a built-in voice.")]
VoiceId = Annotated[
    str,
    Path(
        description="A registered voice id: 16 lowercase hex digits (anything else is a 422).",
        json_schema_extra={"pattern": f"^{VOICE_ID_RE.pattern}$"},
    ),
]
_EXISTED: api_docs.Responses = {
    200: {"model": VoiceCreated, "description": "The same registration exists already: nothing was written."}
}
_UPLOAD_ERRORS = api_docs.errors(409, 413, 422, 503, 507)


class UploadBody:
    """A request's body as voicebank.uploads reads it: Starlette's disconnect becomes the service's own error."""

    def __init__(self, request: Request) -> None:
        self.headers = request.headers
        self._request = request

    async def stream(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._request.stream():
                yield chunk
        except ClientDisconnect:
            raise ClientDisconnected("client disconnected while uploading") from None


def _flag(parts: dict[str, FormPart], name: str) -> bool:
    part = parts.get(name)
    if part is None:
        return False
    value = part.text().strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise InvalidInput(f"{name} must be true or false, not {value[:20]!r}", code="invalid_field")


def registration_from_form(parts: dict[str, FormPart]) -> Registration:
    audio, pack = parts.get("audio"), parts.get("voice_pack")
    if (audio is None or audio.filename is None) and (pack is None or pack.filename is None):
        raise InvalidInput(
            "the form needs an 'audio' file (or, for kokoro, a 'voice_pack' file)", code="audio_required"
        )
    engine = parts.get("engine")
    if engine is None or not engine.text().strip():
        raise InvalidInput(f"the form needs an 'engine' (one of {', '.join(FAMILIES)})", code="engine_required")
    seed, seed_text = parts.get("seed_audio"), parts.get("seed_text")
    return Registration(
        audio=bytes(audio.data) if audio is not None else b"",
        voice_pack=bytes(pack.data) if pack is not None else None,
        voice_pack_filename=(pack.filename or "") if pack is not None else "",
        engine=engine.text().strip(),
        ref_text=parts["ref_text"].text() if "ref_text" in parts else "",
        x_vector_only_mode=_flag(parts, "x_vector_only_mode"),
        seed_audio=bytes(seed.data) if seed is not None and seed.data else None,
        seed_text=seed_text.text() if seed_text is not None else None,
        replace=_flag(parts, "replace"),
        language=_language(parts),
    )


def _language(parts: dict[str, FormPart]) -> str | None:
    """The optional `language` field as a canonical code (any spelling the speech routes take)."""
    part = parts.get("language")
    if part is None or not part.text().strip():
        return None
    language = LANGUAGES.get(part.text().strip().lower().replace("_", "-"))
    if language is None:
        raise InvalidInput(f"language {excerpt(part.text())!r} is not supported", code="unsupported_language")
    return language.code


@router.post(
    "/voices",
    response_model=VoiceCreated,
    status_code=201,
    openapi_extra=api_docs.form_body(VoiceForm),
    responses={**_EXISTED, **_UPLOAD_ERRORS, **api_docs.errors(400, 415)},
)
async def register_voice(request: Request, service: ServiceDep) -> JSONResponse:
    with service.uploads.reservation() as held:  # uploads held in memory count against one budget
        parts = await read_form(UploadBody(request), file_limit=service.settings.max_upload_bytes, reservation=held)
        entry, created = await asyncio.to_thread(service.registry.register, registration_from_form(parts))
    body = VoiceCreated(voice_id=entry.voice_id, created=created)
    return JSONResponse(body.model_dump(), status_code=201 if created else 200)


@router.get("/voices")
async def list_voices(service: ServiceDep) -> dict[str, Any]:
    return {"voices": await asyncio.to_thread(service.catalog.listing)}


@router.post(
    "/voices/bundle",
    response_model=VoiceCreated,
    status_code=201,
    responses={**_EXISTED, **_UPLOAD_ERRORS},
    openapi_extra=api_docs.file_body(
        bundles.MEDIA_TYPE, "A voice bundle, as GET /voices/{voice_id}/bundle answers it."
    ),
)
async def import_bundle(request: Request, service: ServiceDep) -> JSONResponse:
    """Register a voice from another node's bundle (a zip): refused, with nothing written, unless its content hashes
    to the id it claims."""
    limit = 2 * service.settings.max_upload_bytes + 64 * 1024
    with service.uploads.reservation() as held:
        data = await read_body(UploadBody(request), limit, held)
        registration = bundles.registration(data, service.settings.max_upload_bytes)
        entry, created = await asyncio.to_thread(service.registry.register, registration)
    body = VoiceCreated(voice_id=entry.voice_id, created=created)
    return JSONResponse(body.model_dump(), status_code=201 if created else 200)


@router.get(
    "/voices/{voice_id}/bundle",
    response_class=Response,
    responses={**api_docs.file_answer(bundles.MEDIA_TYPE, "The bundle."), **api_docs.errors(404, 422)},
)
async def export_bundle(voice_id: VoiceId, service: ServiceDep) -> Response:
    """The registration as a self-contained archive (clip, transcript, engine, mode, seed; no derived caches)."""
    entry = await asyncio.to_thread(service.registry.lookup, voice_id)
    data = await asyncio.to_thread(bundles.export, entry)
    disposition = f'attachment; filename="{entry.voice_id}.polytts-voice.zip"'
    return Response(data, media_type=bundles.MEDIA_TYPE, headers={"Content-Disposition": disposition})


@router.get("/voices/{voice_id}", responses=api_docs.errors(404))
async def get_voice(voice_id: VoiceName, service: ServiceDep) -> dict[str, Any]:
    return service.catalog.view(await asyncio.to_thread(service.catalog.get, voice_id))


@router.delete("/voices/{voice_id}", responses=api_docs.errors(404, 409, 422))
async def delete_voice(voice_id: VoiceName, service: ServiceDep) -> dict[str, str]:
    if voice_id in service.catalog.builtins():
        raise Conflict(f"{voice_id!r} is a built-in voice and cannot be deleted", code="builtin_voice")
    entry = await asyncio.to_thread(service.registry.delete, check_voice_id(voice_id))
    return {"deleted": entry.voice_id}
