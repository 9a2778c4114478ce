"""A lexicon read from a W3C Pronunciation Lexicon Specification 1.0 document (PLS).

`<lexicon alphabet xml:lang>` holds `<lexeme>`s; each has one or more `<grapheme>`s and its pronunciations,
`<phoneme>` (in the lexicon's alphabet unless it names its own) or `<alias>`; the first with `prefer="true"` is
taken, else the first. IPA and Kokoro's own symbols are read as they are, X-SAMPA and CMU ARPAbet converted
(text.phonemes). `<meta>`, `<metadata>` and `<example>` are read past; any other element is refused naming it. The
document is parsed with DTDs, entities and external references refused (text.safe_xml).
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from errors import InvalidInput
from lexicons.lexicon import Lexeme, Lexicon, check_entries, lexeme
from text.phonemes import alphabet_of
from text.safe_xml import Element, parse_xml

PLS_NAMESPACE = "http://www.w3.org/2005/01/pronunciation-lexicon"
UNDETERMINED = "und"
"""BCP 47's language of a lexicon for every language (PLS requires an `xml:lang`)."""
_SKIPPED = frozenset({"meta", "metadata"})
_LEXEME_PARTS = frozenset({"grapheme", "phoneme", "alias", "example"})


def read_pls(document: bytes, name: str, max_entries: int) -> Lexicon:
    root = parse_xml(document, "the lexicon", max_depth=8, max_elements=8 * max_entries + 64)
    if root.tag != "lexicon" or root.namespace not in ("", PLS_NAMESPACE):
        raise InvalidInput(
            f"the document's root is <{root.tag}>, not a PLS <lexicon> ({PLS_NAMESPACE})", code="invalid_lexicon"
        )
    alphabet = root.attrs.get("alphabet", "ipa")
    alphabet_of(alphabet)
    lexemes: list[Lexeme] = []
    for child in root.elements():
        if child.tag in _SKIPPED:
            continue
        if child.tag != "lexeme":
            raise _unknown(child, "<lexicon>")
        lexemes.append(_lexeme(child, alphabet))
        check_entries(len(lexemes), max_entries)
    language = root.attrs.get("xml:lang")
    return Lexicon(name, None if language in (None, "", UNDETERMINED) else language, tuple(lexemes))


def _lexeme(element: Element, alphabet: str) -> Lexeme:
    parts = element.elements()
    for part in parts:
        if part.tag not in _LEXEME_PARTS:
            raise _unknown(part, "<lexeme>")
    graphemes = [part.text() for part in parts if part.tag == "grapheme"]
    said = [part for part in parts if part.tag in ("phoneme", "alias")]
    if not said:
        raise InvalidInput(f"the <lexeme> at line {element.line} has no <phoneme> or <alias>", code="invalid_lexicon")
    chosen = next((part for part in said if part.attrs.get("prefer") == "true"), said[0])
    if chosen.tag == "alias":
        return lexeme(graphemes, chosen.text(), None, None)
    return lexeme(graphemes, None, chosen.text(), chosen.attrs.get("alphabet", alphabet))


def _unknown(element: Element, inside: str) -> InvalidInput:
    return InvalidInput(
        f"<{element.tag}> (line {element.line}, column {element.column}) is not an element of {inside} in PLS 1.0",
        code="invalid_lexicon",
        detail={"element": element.tag, "line": element.line, "column": element.column},
    )


def write_pls(lexicon: Lexicon) -> bytes:
    """The lexicon as a PLS document (its phonemes in Kokoro's symbols, `alphabet="x-kokoro"`): what a download
    answers."""
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<lexicon version="1.0" xmlns="{PLS_NAMESPACE}" alphabet="x-kokoro" '
        f"xml:lang={quoteattr(lexicon.language or UNDETERMINED)}>",
    ]
    for entry in lexicon.lexemes:
        graphemes = "".join(f"<grapheme>{escape(word)}</grapheme>" for word in entry.graphemes)
        said = f"<alias>{escape(entry.alias)}</alias>" if entry.alias is not None else ""
        if entry.phonemes is not None:
            said = f"<phoneme>{escape(entry.phonemes)}</phoneme>"
        lines.append(f"  <lexeme>{graphemes}{said}</lexeme>")
    lines.append("</lexicon>")
    return ("\n".join(lines) + "\n").encode()
