"""A pronunciation lexicon: entries that say how words are pronounced, by another text (an alias) or by phonemes,
and its content-hashed id.

An entry's graphemes are the words it matches (one or several words each); its phonemes are in Kokoro's symbols,
converted from the alphabet the document gave when it was read (text.phonemes). The id is the hash of the lexicon's
content as read (name, language, entries in order), so the same document has the same id on every node, and a
changed lexicon is another lexicon: nothing keyed by an id (a compiled matcher, a cache entry) can go stale.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from errors import InvalidInput, PayloadTooLarge
from text.phonemes import to_kokoro

LEXICON_ID = re.compile(r"^[0-9a-f]{16}$")
WORD = re.compile(r"\w+(?:['’.\-]\w+)*\+*")
"""A word as lexicons match it: letters and digits, joined by apostrophes, dots or hyphens inside it ("o'clock",
"e.g", "x-ray"), and trailing plus signs ("C++")."""
MAX_GRAPHEME_CHARS = 200
MAX_ALIAS_CHARS = 1000


@dataclass(frozen=True)
class Lexeme:
    """One entry: its graphemes said as `alias` (a text) or as `phonemes` (Kokoro's symbols), exactly one."""

    graphemes: tuple[str, ...]
    alias: str | None = None
    phonemes: str | None = None

    def public(self) -> dict[str, Any]:
        said = {"alias": self.alias} if self.alias is not None else {"phoneme": self.phonemes, "alphabet": "kokoro"}
        return {"graphemes": list(self.graphemes), **said}


@dataclass(frozen=True)
class Lexicon:
    name: str
    language: str | None
    """The language its entries are for, as BCP 47 (`xml:lang`), e.g. 'en-US'; None: every language."""
    lexemes: tuple[Lexeme, ...]

    @functools.cached_property
    def lexicon_id(self) -> str:
        """Hashed once: a request names lexicons by id on every use."""
        return hashlib.sha256(self.canonical()).hexdigest()[:16]

    def canonical(self) -> bytes:
        """Its content as stored: the bytes its id hashes."""
        body = {"name": self.name, "language": self.language, "lexemes": [lexeme.public() for lexeme in self.lexemes]}
        return json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_canonical(cls, data: bytes) -> Lexicon:
        body = json.loads(data)
        lexemes = tuple(
            Lexeme(tuple(entry["graphemes"]), entry.get("alias"), entry.get("phoneme")) for entry in body["lexemes"]
        )
        return cls(body["name"], body["language"], lexemes)

    def applies_to(self, language: str) -> bool:
        """Whether its entries are for `language` (a code such as 'en-us'): the same primary language, any region
        ('en-US' entries serve a British voice too, since a lexicon names one region where it means the language)."""
        if self.language is None:
            return True
        return self.language.lower().split("-")[0] == language.lower().split("-")[0]

    def public(self, entries: bool = False) -> dict[str, Any]:
        """As the lexicon routes answer it: with its entries when asked."""
        described: dict[str, Any] = {
            "lexicon_id": self.lexicon_id,
            "name": self.name,
            "language": self.language,
            "entries": len(self.lexemes),
            "phoneme_entries": sum(lexeme.phonemes is not None for lexeme in self.lexemes),
        }
        if entries:
            described["lexemes"] = [lexeme.public() for lexeme in self.lexemes]
        return described


def check_lexicon_id(lexicon_id: str) -> str:
    if not LEXICON_ID.match(lexicon_id):
        raise InvalidInput(f"lexicon id {lexicon_id[:40]!r} is not 16 lowercase hex digits", code="invalid_lexicon_id")
    return lexicon_id


def lexeme(graphemes: list[str], alias: str | None, phonemes: str | None, alphabet: str | None) -> Lexeme:
    """An entry checked and made ready: graphemes that hold a word each, exactly one of an alias and phonemes, the
    phonemes converted to Kokoro's symbols (a 422 `unsayable_phonemes` names a symbol it cannot say)."""
    words = [" ".join(grapheme.split()) for grapheme in graphemes]
    if not words or any(not WORD.search(word) or len(word) > MAX_GRAPHEME_CHARS for word in words):
        raise InvalidInput(
            f"an entry's graphemes {words[:3]!r} must each hold a word, at most {MAX_GRAPHEME_CHARS} characters",
            code="invalid_lexicon",
        )
    if (alias is None) == (phonemes is None):
        raise InvalidInput(
            f"the entry for {words[0][:40]!r} must give exactly one of an alias and a phoneme", code="invalid_lexicon"
        )
    if alias is not None:
        said = " ".join(alias.split())
        if not said or len(said) > MAX_ALIAS_CHARS:
            raise InvalidInput(
                f"the alias of {words[0][:40]!r} must hold 1 to {MAX_ALIAS_CHARS} characters", code="invalid_lexicon"
            )
        return Lexeme(tuple(words), alias=said)
    assert phonemes is not None
    return Lexeme(tuple(words), phonemes=to_kokoro(phonemes, alphabet or "ipa", f" (for {words[0][:40]!r})"))


def check_entries(count: int, max_entries: int) -> None:
    if count > max_entries:
        raise PayloadTooLarge(
            f"the lexicon has more than {max_entries} entries (POLYTTS_MAX_LEXICON_ENTRIES)", code="lexicon_too_large"
        )


class _BundleEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    graphemes: list[str]
    alias: str | None = None
    phoneme: str | None = None
    alphabet: Literal["kokoro"] | None = None


class _Bundle(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(max_length=200)
    language: str | None = Field(max_length=35)
    lexemes: list[_BundleEntry]


def from_bundle(data: bytes, max_entries: int, lexicon_id: str | None = None) -> Lexicon:
    """A lexicon's bundle (its canonical content, as `GET /lexicons/{id}/bundle` answers it) checked as an upload
    is: at most `max_entries` entries (413 `lexicon_too_large`), each read again as an upload's (a 422
    `invalid_lexicon` or `unsayable_phonemes` naming what is wrong); the bundle exactly its canonical bytes, so that
    its id is the hash of what was sent (422 `invalid_bundle`); that id `lexicon_id` where one is expected (422
    `bundle_id_mismatch`)."""
    try:
        bundle = _Bundle.model_validate_json(data)
    except ValidationError as exc:
        raise InvalidInput(
            f"the body is not a lexicon bundle: {exc.errors()[0]['msg']}", code="invalid_bundle"
        ) from None
    check_entries(len(bundle.lexemes), max_entries)
    lexemes = tuple(
        lexeme(entry.graphemes, entry.alias, entry.phoneme, "kokoro" if entry.phoneme is not None else None)
        for entry in bundle.lexemes
    )
    lexicon = Lexicon(bundle.name, bundle.language, lexemes)
    if lexicon.canonical() != data:
        raise InvalidInput(
            "the body is not a lexicon bundle as GET /lexicons/{lexicon_id}/bundle answers it (its canonical JSON)",
            code="invalid_bundle",
        )
    if lexicon_id is not None and lexicon.lexicon_id != lexicon_id:
        raise InvalidInput(
            f"the bundle is lexicon {lexicon.lexicon_id}, not {lexicon_id}",
            code="bundle_id_mismatch",
            detail={"lexicon_id": lexicon.lexicon_id},
        )
    return lexicon
