"""A lexicon given as JSON rules: a list of `{"grapheme", "alias"}` and `{"grapheme", "phoneme", "alphabet"}`, bare
or as `{"name", "language", "rules"}`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from errors import InvalidInput, invalid_fields
from lexicons.lexicon import Lexicon, check_entries, lexeme


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grapheme: str | list[str] = Field(description="The word or words it matches (whole words), or several.")
    alias: str | None = Field(None, description="A text to say instead.")
    phoneme: str | None = Field(None, description="Phonemes to say instead, in `alphabet`.")
    alphabet: str | None = Field(None, description="ipa (the default), x-sampa, cmu-arpabet or kokoro.")


class Rules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=200)
    language: str | None = Field(
        None, max_length=35, description="BCP 47, e.g. 'en-US': the entries serve that language only."
    )
    rules: list[Rule]


_BODY: TypeAdapter[Rules | list[Rule]] = TypeAdapter(Rules | list[Rule])


def read_rules(document: bytes, name: str, max_entries: int) -> Lexicon:
    """The lexicon a JSON body gives (`name` unless the body names one)."""
    try:
        parsed = _BODY.validate_json(document)
    except ValidationError as exc:
        raise invalid_fields(exc.errors(), "the lexicon's rules: ") from None
    rules = parsed if isinstance(parsed, Rules) else Rules(name=name, rules=parsed)
    return from_rules(rules.rules, rules.name or name, rules.language, max_entries)


def from_rules(rules: list[Rule], name: str, language: str | None, max_entries: int) -> Lexicon:
    check_entries(len(rules), max_entries)
    if not rules:
        raise InvalidInput("the lexicon has no rules", code="invalid_lexicon")
    lexemes = tuple(
        lexeme(
            rule.grapheme if isinstance(rule.grapheme, list) else [rule.grapheme],
            rule.alias,
            rule.phoneme,
            rule.alphabet,
        )
        for rule in rules
    )
    return Lexicon(name, language, lexemes)
