"""Pronunciation lexicons as a resource: `POST /lexicons` (a W3C PLS document or JSON rules), `GET /lexicons`,
`GET /lexicons/{id}` (with its entries), `GET /lexicons/{id}/pls` (download), `DELETE /lexicons/{id}`, and the
fleet's bundles: `GET /lexicons/{id}/bundle`, `PUT /lexicons/{id}/bundle` (import) and
`GET /lexicons/dictionaries/{id}/bundle` (a vendor front's dictionary, for a peer)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from errors import InvalidInput
from lexicons.lexicon import LEXICON_ID, Lexicon, check_lexicon_id, from_bundle
from lexicons.pls import read_pls, write_pls
from lexicons.rules import read_rules
from voicebank.uploads import read_body
from web import api_docs
from web.dependencies import ServiceDep
from web.protocol import LexiconCreated, LexiconDescription, LexiconList
from web.routes.voices import UploadBody

router = APIRouter(tags=["lexicons"])

PLS_MEDIA_TYPE = "application/pls+xml"
LexiconId = Annotated[
    str,
    Path(
        description="A lexicon id: 16 lowercase hex digits.", json_schema_extra={"pattern": f"^{LEXICON_ID.pattern}$"}
    ),
]
_BODY = {
    "requestBody": {
        "required": True,
        "description": "A W3C PLS 1.0 document (alphabet ipa, x-sampa, cmu-arpabet or kokoro), or JSON rules: a list "
        'of {"grapheme", "alias"} and {"grapheme", "phoneme", "alphabet"}, or {"name", "language", "rules"}. At most '
        "POLYTTS_MAX_LEXICON_BYTES.",
        "content": {
            PLS_MEDIA_TYPE: {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    }
}


def read_lexicon(document: bytes, name: str, max_entries: int) -> Lexicon:
    """A PLS document (it starts with `<`) or JSON rules (`[` or `{`), told apart by their first character."""
    start = document.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start == b"<":
        return read_pls(document, name, max_entries)
    if start in (b"[", b"{"):
        return read_rules(document, name, max_entries)
    raise InvalidInput(
        "a lexicon is a PLS document (XML) or a JSON list of rules; this body is neither", code="invalid_lexicon"
    )


@router.post(
    "/lexicons",
    response_model=LexiconCreated,
    status_code=201,
    openapi_extra=_BODY,
    responses={
        200: {"model": LexiconCreated, "description": "Stored already: nothing was written."},
        **api_docs.errors(413, 422),
    },
)
async def create_lexicon(
    request: Request,
    service: ServiceDep,
    name: Annotated[str, Query(max_length=200, description="A name for it (JSON rules may give their own).")] = "",
) -> JSONResponse:
    settings = service.settings
    document = await read_body(UploadBody(request), settings.max_lexicon_bytes)
    lexicon = await asyncio.to_thread(read_lexicon, document, name, settings.max_lexicon_entries)
    created = await asyncio.to_thread(service.lexicons.put, lexicon)
    body = LexiconCreated(lexicon_id=lexicon.lexicon_id, created=created, entries=len(lexicon.lexemes))
    return JSONResponse(body.model_dump(), status_code=201 if created else 200)


@router.put(
    "/lexicons/{lexicon_id}/bundle",
    response_model=LexiconCreated,
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The lexicon's bundle, exactly as GET /lexicons/{lexicon_id}/bundle answers it.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
    responses={
        200: {"model": LexiconCreated, "description": "Stored already: nothing was written."},
        **api_docs.errors(413, 422),
    },
)
async def import_lexicon_bundle(lexicon_id: LexiconId, request: Request, service: ServiceDep) -> JSONResponse:
    """Store a lexicon from another node's bundle under its id: checked as the peer fetch checks it (the id it
    hashes to, its bounds, the symbols of its phonemes), stored atomically, nothing written when it is refused."""
    check_lexicon_id(lexicon_id)
    settings = service.settings
    data = await read_body(UploadBody(request), settings.max_lexicon_bytes)
    lexicon = await asyncio.to_thread(from_bundle, data, settings.max_lexicon_entries, lexicon_id)
    created = await asyncio.to_thread(service.lexicons.put, lexicon)
    body = LexiconCreated(lexicon_id=lexicon.lexicon_id, created=created, entries=len(lexicon.lexemes))
    return JSONResponse(body.model_dump(), status_code=201 if created else 200)


@router.get("/lexicons")
async def list_lexicons(service: ServiceDep) -> LexiconList:
    return LexiconList.model_validate({"lexicons": [lexicon.public() for lexicon in service.lexicons.list()]})


@router.get("/lexicons/{lexicon_id}", responses=api_docs.errors(404, 422))
async def get_lexicon(lexicon_id: LexiconId, service: ServiceDep) -> LexiconDescription:
    return LexiconDescription.model_validate(service.lexicons.get(lexicon_id).public(entries=True))


@router.get(
    "/lexicons/{lexicon_id}/pls",
    response_class=Response,
    responses={200: {"content": {PLS_MEDIA_TYPE: {"schema": {"type": "string"}}}}, **api_docs.errors(404, 422)},
)
async def download_lexicon(lexicon_id: LexiconId, service: ServiceDep) -> Response:
    """The lexicon as a PLS document, its phonemes in Kokoro's symbols (`alphabet="x-kokoro"`)."""
    return Response(write_pls(service.lexicons.get(lexicon_id)), media_type=PLS_MEDIA_TYPE)


@router.delete("/lexicons/{lexicon_id}", status_code=204, responses=api_docs.errors(404, 422))
async def delete_lexicon(lexicon_id: LexiconId, service: ServiceDep) -> Response:
    await asyncio.to_thread(service.lexicons.remove, lexicon_id)
    return Response(status_code=204)


@router.get(
    "/lexicons/{lexicon_id}/bundle",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}}, **api_docs.errors(404, 422)},
)
async def lexicon_bundle(lexicon_id: LexiconId, service: ServiceDep) -> Response:
    """The lexicon's canonical content, which its id hashes: what a peer fetches to pronounce a request naming it."""
    return Response(service.lexicons.get(lexicon_id).canonical(), media_type="application/json")


@router.get(
    "/lexicons/dictionaries/{dictionary_id}/bundle",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}}, **api_docs.errors(404)},
)
async def dictionary_bundle(dictionary_id: str, service: ServiceDep) -> Response:
    """A vendor front's pronunciation dictionary as this node keeps it (its name and its versions, lexicon ids):
    what a peer asks for to honour a request naming it."""
    return Response(service.dictionaries.get(dictionary_id).bundle(), media_type="application/json")
