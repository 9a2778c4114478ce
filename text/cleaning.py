"""The cleaning every request's text goes through before anything reads it, whole or live, on every route.

A lone UTF-16 surrogate (JSON can carry one as `"\\ud800"`) is no character: text holding one is refused, 422
`invalid_text`. Format characters (Unicode category Cf: zero-width spaces and joiners, direction marks, the soft
hyphen, the byte order mark) are invisible and say nothing: they are removed, so that limits, chunking, the cache key
and word timings see the text as a reader sees it. Characters of plane 15 (private use) are refused: the node
carries phonemes in them (text.phoneme_spans). Whitespace is left as it is: it is collapsed where text is cut into
sentences (`text.chunking.collapse_whitespace`), which the text of a live request, arriving in pieces, cannot be
piece by piece.
"""

from __future__ import annotations

import unicodedata

from errors import InvalidInput
from text.phoneme_spans import holds_phonemes


def clean_text(text: str) -> str:
    """`text` with its format characters removed; InvalidInput (`invalid_text`) when it holds a lone surrogate. A
    live request's text is cleaned piece by piece as it arrives, which cleans it as a whole would be."""
    if any(_is_surrogate(char) for char in text):
        raise InvalidInput("text holds a lone UTF-16 surrogate, which is not a character", code="invalid_text")
    if holds_phonemes(text):  # the node's own carrier of phonemes: a client writes them as markup, never so
        raise InvalidInput(
            "text holds characters of Unicode plane 15 (private use), which this node keeps for phonemes; write "
            "phonemes as [word](/phonemes/), SSML or a lexicon",
            code="invalid_phoneme_text",
        )
    return visible_text(text)


def visible_text(text: str) -> str:
    """`text` with every format character and lone surrogate dropped, never refused: for text read without a
    request to answer (`text.normalize.normalize_english` takes any string)."""
    return "".join(char for char in text if not _is_surrogate(char) and unicodedata.category(char) != "Cf")


def _is_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udfff"
