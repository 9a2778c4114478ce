"""Cartesia's pronunciation dictionaries, as the `cartesia` SDK calls them, under PREFIX: create (`POST
/pronunciation-dicts/`), get, update (a new version), list and delete; and the lexicons a request's
`pronunciation_dict_id` names (`dict_lexicons`). An item's alias is text said instead, or phonemes in Cartesia's
`<<p|h|o|n|e|m|e|s>>` form (IPA, pipes between them). A dictionary is a name over lexicon versions
(lexicons.dictionaries); a stored lexicon's own id (`POST /lexicons`) is taken as a `pronunciation_dict_id` too."""

from __future__ import annotations

import asyncio
import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from lexicons.dictionaries import Dictionary
from lexicons.lexicon import LEXICON_ID, Lexeme, Lexicon, check_entries, lexeme
from lifecycle.service import Service
from web import api_docs
from web.dependencies import ServiceDep
from web.fronts.cartesia.protocol import PREFIX, CartesiaErrorBody, PageQuery

router = APIRouter(prefix=PREFIX + "/pronunciation-dicts", tags=["cartesia"])
_ERRORS = api_docs.errors(404, 413, 422, shape=CartesiaErrorBody)


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=200)
    alias: str = Field(min_length=1, max_length=1000)
    case_sensitive: bool | None = Field(
        None, strict=True, description="False (the default): every capitalization matches."
    )


class DictionaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    items: list[Item] | None = None


class DictionaryUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    items: list[Item] | None = None


async def dict_lexicons(service: Service, dict_id: str | None) -> list[str]:
    """The lexicon a `pronunciation_dict_id` names: a dictionary's latest version, or a lexicon's own id, kept here
    or by a peer."""
    if dict_id is None:
        return []
    catalog = service.lexicon_catalog
    if LEXICON_ID.match(dict_id):
        return [(await catalog.resolve(dict_id)).lexicon_id]
    return [(await catalog.version(dict_id, None)).lexicon_id]


def _lexeme(item: Item) -> Lexeme:
    word = item.text if item.case_sensitive else item.text.lower()
    alias = item.alias.strip()
    if alias.startswith("<<") and alias.endswith(">>"):
        return lexeme([word], None, alias[2:-2].replace("|", ""), "ipa")
    return lexeme([word], alias, None, None)


def _item(entry: Lexeme) -> dict[str, Any]:
    case_sensitive = entry.graphemes[0] != entry.graphemes[0].lower()
    alias = entry.alias if entry.alias is not None else f"<<{'|'.join(entry.phonemes or '')}>>"
    return {"text": entry.graphemes[0], "alias": alias, "case_sensitive": case_sensitive}


def _view(service: Service, dictionary: Dictionary) -> dict[str, Any]:
    """Cartesia's `PronunciationDict`."""
    created = datetime.datetime.fromtimestamp(dictionary.created, datetime.UTC).isoformat()
    return {
        "id": dictionary.dictionary_id,
        "name": dictionary.name,
        "created_at": created,
        "items": [_item(entry) for entry in service.lexicons.get(dictionary.latest).lexemes],
        "owner_id": "polytts",
        "pinned": False,
    }


def _lexicon(service: Service, name: str, items: list[Item]) -> str:
    check_entries(len(items), service.settings.max_lexicon_entries)
    lexicon = Lexicon(name, None, tuple(_lexeme(item) for item in items))
    service.lexicons.put(lexicon)
    return lexicon.lexicon_id


@router.post("/", responses=_ERRORS)
async def create(body: DictionaryBody, service: ServiceDep) -> dict[str, Any]:
    lexicon_id = await asyncio.to_thread(_lexicon, service, body.name, body.items or [])
    dictionary = await asyncio.to_thread(service.dictionaries.create, body.name, None, lexicon_id)
    return _view(service, dictionary)


@router.get("/", responses=_ERRORS)
async def list_dictionaries(query: Annotated[PageQuery, Query()], service: ServiceDep) -> dict[str, Any]:
    """A page of the dictionaries (`limit`, `starting_after`, `ending_before`, as the SDK's pages ask)."""
    return query.page([_view(service, dictionary) for dictionary in service.dictionaries.list()])


@router.get("/{dict_id}", responses=_ERRORS)
async def get(dict_id: str, service: ServiceDep) -> dict[str, Any]:
    return _view(service, service.dictionaries.get(dict_id))


@router.patch("/{dict_id}", responses=_ERRORS)
async def update(dict_id: str, body: DictionaryUpdate, service: ServiceDep) -> dict[str, Any]:
    """A new version: its items (the old ones when not given) under its name."""
    dictionary = service.dictionaries.get(dict_id)
    name = body.name or dictionary.name
    items = body.items
    if items is None:
        items = [Item.model_validate(_item(e)) for e in service.lexicons.get(dictionary.latest).lexemes]
    lexicon_id = await asyncio.to_thread(_lexicon, service, name, items)
    dictionary = await asyncio.to_thread(service.dictionaries.add_version, dict_id, lexicon_id, name)
    return _view(service, dictionary)


@router.delete("/{dict_id}", status_code=204, responses=_ERRORS)
async def delete(dict_id: str, service: ServiceDep) -> Response:
    """The dictionary is gone; its versions stay stored as lexicons (a request may name one by its id)."""
    await asyncio.to_thread(service.dictionaries.remove, dict_id)
    return Response(status_code=204)
