"""ElevenLabs' pronunciation-dictionary API, as the `elevenlabs` SDK calls it, under PREFIX: create a dictionary from
a PLS file (`add-from-file`) or from rules (`add-from-rules`), add, remove and set its rules (each edit a new version),
get it with its rules, list them, and download a version as PLS. A dictionary is a name over lexicon versions
(lexicons.dictionaries): a version id is a lexicon id, so `pronunciation_dictionary_locators` on the speech routes
and both WebSockets name lexicons (`locator_lexicons`). ElevenLabs' rules match whole words here; a rule asking for
matches inside words (`word_boundaries: false`) is refused, never applied otherwise."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from errors import InvalidInput
from lexicons.dictionaries import Dictionary
from lexicons.lexicon import Lexeme, Lexicon, check_entries, lexeme
from lexicons.pls import read_pls, write_pls
from lifecycle.service import Service
from voicebank.uploads import read_form
from web import api_docs
from web.dependencies import ServiceDep
from web.fronts.elevenlabs.protocol import PREFIX, ElevenLabsErrorBody, Locator
from web.routes.voices import UploadBody

router = APIRouter(prefix=PREFIX + "/v1/pronunciation-dictionaries", tags=["elevenlabs"])
_ERRORS = api_docs.errors(404, 413, 422, shape=ElevenLabsErrorBody)


class Rule(BaseModel):
    """One of ElevenLabs' rules: `alias` or `phoneme` (in `alphabet`: ipa, cmu-arpabet, x-sampa or kokoro)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["alias", "phoneme"]
    string_to_replace: str = Field(min_length=1, max_length=200)
    alias: str | None = None
    phoneme: str | None = None
    alphabet: str | None = None
    case_sensitive: bool | None = Field(None, strict=True, description="False: the word matches in any case.")
    word_boundaries: bool | None = Field(
        None, strict=True, description="Only true (the default): rules match whole words."
    )


class RulesBody(BaseModel):
    rules: list[Rule]
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(None, max_length=4096)
    workspace_access: str | None = None


class RuleEdit(BaseModel):
    rules: list[Rule]


class RuleRemoval(BaseModel):
    rule_strings: list[str]


async def locator_lexicons(service: Service, locators: list[Locator] | None) -> list[str]:
    """The lexicon ids the locators name, their dictionaries kept here or by a peer (404 `dictionary_not_found` for
    one no node keeps)."""
    catalog = service.lexicon_catalog
    return [
        (await catalog.version(locator.pronunciation_dictionary_id, locator.version_id)).lexicon_id
        for locator in locators or ()
    ]


def _lexeme(rule: Rule) -> Lexeme:
    if rule.word_boundaries is False:
        raise InvalidInput(
            f"the rule for {rule.string_to_replace[:40]!r} asks for matches inside words (word_boundaries false); "
            "this node matches whole words only",
            code="invalid_lexicon",
        )
    word = rule.string_to_replace.lower() if rule.case_sensitive is False else rule.string_to_replace
    if rule.type == "alias":
        return lexeme([word], rule.alias if rule.alias is not None else "", None, None)
    return lexeme([word], None, rule.phoneme or "", rule.alphabet or "ipa")


def _rule(entry: Lexeme) -> dict[str, Any]:
    if entry.alias is not None:
        return {"type": "alias", "string_to_replace": entry.graphemes[0], "alias": entry.alias}
    return {"type": "phoneme", "string_to_replace": entry.graphemes[0], "phoneme": entry.phonemes, "alphabet": "kokoro"}


def _view(service: Service, dictionary: Dictionary, rules: bool = False) -> dict[str, Any]:
    lexicon = service.lexicons.get(dictionary.latest)
    view: dict[str, Any] = {
        "id": dictionary.dictionary_id,
        "latest_version_id": dictionary.latest,
        "latest_version_rules_num": len(lexicon.lexemes),
        "name": dictionary.name,
        "permission_on_resource": "admin",
        "created_by": "polytts",
        "creation_time_unix": dictionary.created,
        "archived_time_unix": None,
        "description": dictionary.description,
    }
    if rules:
        view["rules"] = [_rule(entry) for entry in lexicon.lexemes]
    return view


def _created(service: Service, dictionary: Dictionary) -> dict[str, Any]:
    """ElevenLabs' `AddPronunciationDictionaryResponseModel`."""
    return {
        "id": dictionary.dictionary_id,
        "name": dictionary.name,
        "created_by": "polytts",
        "creation_time_unix": dictionary.created,
        "version_id": dictionary.latest,
        "version_rules_num": len(service.lexicons.get(dictionary.latest).lexemes),
        "description": dictionary.description,
        "permission_on_resource": "admin",
    }


def _store(service: Service, lexicon: Lexicon) -> str:
    service.lexicons.put(lexicon)
    return lexicon.lexicon_id


@router.post("/add-from-file", responses=api_docs.errors(404, 413, 415, 422, shape=ElevenLabsErrorBody))
async def add_from_file(request: Request, service: ServiceDep) -> dict[str, Any]:
    """A dictionary from a PLS file (multipart: `name`, `file`, `description`)."""
    settings = service.settings
    parts = await read_form(UploadBody(request), file_limit=settings.max_lexicon_bytes)
    if "name" not in parts or not parts["name"].text().strip():
        raise InvalidInput("the form needs a `name`", code="invalid_input")
    name = parts["name"].text().strip()
    description = parts["description"].text() if "description" in parts else None
    if "file" not in parts:
        raise InvalidInput("the form needs a PLS `file`", code="invalid_lexicon")
    lexicon = await asyncio.to_thread(read_pls, bytes(parts["file"].data), name, settings.max_lexicon_entries)
    dictionary = await asyncio.to_thread(
        service.dictionaries.create, name, description, await asyncio.to_thread(_store, service, lexicon)
    )
    return _created(service, dictionary)


@router.post("/add-from-rules", responses=_ERRORS)
async def add_from_rules(body: RulesBody, service: ServiceDep) -> dict[str, Any]:
    check_entries(len(body.rules), service.settings.max_lexicon_entries)
    lexicon = Lexicon(body.name, None, tuple(_lexeme(rule) for rule in body.rules))
    dictionary = await asyncio.to_thread(
        service.dictionaries.create, body.name, body.description, await asyncio.to_thread(_store, service, lexicon)
    )
    return _created(service, dictionary)


async def _edited(service: Service, dictionary_id: str, entries: list[Lexeme]) -> dict[str, Any]:
    """A new version holding `entries`: ElevenLabs' `PronunciationDictionaryRulesResponseModel`."""
    check_entries(len(entries), service.settings.max_lexicon_entries)
    dictionary = service.dictionaries.get(dictionary_id)
    lexicon = Lexicon(dictionary.name, service.lexicons.get(dictionary.latest).language, tuple(entries))
    lexicon_id = await asyncio.to_thread(_store, service, lexicon)
    dictionary = await asyncio.to_thread(service.dictionaries.add_version, dictionary_id, lexicon_id)
    return {"id": dictionary_id, "version_id": dictionary.latest, "version_rules_num": len(entries)}


def _current(service: Service, dictionary_id: str) -> list[Lexeme]:
    return list(service.lexicons.get(service.dictionaries.get(dictionary_id).latest).lexemes)


@router.post("/{dictionary_id}/add-rules", responses=_ERRORS)
async def add_rules(dictionary_id: str, body: RuleEdit, service: ServiceDep) -> dict[str, Any]:
    """The rules added; a rule for a word the dictionary says already replaces it."""
    added = [_lexeme(rule) for rule in body.rules]
    replaced = {grapheme for entry in added for grapheme in entry.graphemes}
    kept = [entry for entry in _current(service, dictionary_id) if not replaced & set(entry.graphemes)]
    return await _edited(service, dictionary_id, kept + added)


@router.post("/{dictionary_id}/remove-rules", responses=_ERRORS)
async def remove_rules(dictionary_id: str, body: RuleRemoval, service: ServiceDep) -> dict[str, Any]:
    removed = set(body.rule_strings)
    kept = [entry for entry in _current(service, dictionary_id) if not removed & set(entry.graphemes)]
    return await _edited(service, dictionary_id, kept)


@router.post("/{dictionary_id}/set-rules", responses=_ERRORS)
async def set_rules(dictionary_id: str, body: RuleEdit, service: ServiceDep) -> dict[str, Any]:
    return await _edited(service, dictionary_id, [_lexeme(rule) for rule in body.rules])


@router.get("", responses=_ERRORS)
async def list_dictionaries(service: ServiceDep) -> dict[str, Any]:
    views = [_view(service, dictionary) for dictionary in service.dictionaries.list()]
    return {"pronunciation_dictionaries": views, "next_cursor": None, "has_more": False}


@router.get("/{dictionary_id}", responses=_ERRORS)
async def get_dictionary(dictionary_id: str, service: ServiceDep) -> dict[str, Any]:
    return _view(service, service.dictionaries.get(dictionary_id), rules=True)


@router.get(
    "/{dictionary_id}/{version_id}/download",
    response_class=Response,
    responses={200: {"content": {"application/pls+xml": {"schema": {"type": "string"}}}}, **_ERRORS},
)
async def download(dictionary_id: str, version_id: str, service: ServiceDep) -> Response:
    """The version as a PLS document (its phonemes in Kokoro's symbols, `alphabet="x-kokoro"`)."""
    lexicon_id = service.dictionaries.get(dictionary_id).version(version_id)
    return Response(write_pls(service.lexicons.get(lexicon_id)), media_type="application/pls+xml")
