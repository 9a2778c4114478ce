"""Phonemes carried inside a text as spoken, to reach the engine's G2P untouched.

A lexicon's phoneme entry, an inline `[word](/phonemes/)` and an SSML `<phoneme>` say how a span is pronounced in
Kokoro's symbols. The span travels with the rest of the text (normalization, chunking, caches, the live segmenter)
as one word of Supplementary Private Use Area-A characters, one per phoneme symbol (spaces included): no rewrite of
the text reads them, no chunk boundary falls inside them, and the cache key holds them. The engine's G2P phonemizes
the text around each span and puts the span's own phonemes in its place (`phonemize_spans`). A client's own text
holding such characters is refused (text.cleaning), so only the node writes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_BASE = 0xF0000
"""Plane 15's first code point: symbol `c` is carried as `chr(_BASE + ord(c))` (every Kokoro symbol is in the BMP)."""
_SPAN = re.compile("[\U000f0000-\U000fffff]+")


def encode(phonemes: str) -> str:
    """Phonemes (Kokoro's symbols) as the one word a text carries them in."""
    return "".join(chr(_BASE + ord(char)) for char in phonemes)


def holds_phonemes(text: str) -> bool:
    return _SPAN.search(text) is not None


def decoded(span: str) -> str:
    return "".join(chr(ord(char) - _BASE) for char in span)


def phonemize_spans(text: str, phonemize: Callable[[str], str]) -> str:
    """The phonemes of `text`: its phoneme spans as they are, the text between them through `phonemize` (the text
    of a side that holds only spaces and punctuation is kept as it is, which Kokoro reads as a pause)."""
    if not holds_phonemes(text):
        return phonemize(text)
    pieces: list[str] = []
    pos = 0
    for match in _SPAN.finditer(text):
        pieces.append(_phonemized(text[pos : match.start()], phonemize))
        pieces.append(decoded(match.group()))
        pos = match.end()
    pieces.append(_phonemized(text[pos:], phonemize))
    return " ".join("".join(pieces).split())


def _phonemized(text: str, phonemize: Callable[[str], str]) -> str:
    """`text` phonemized, with a space on each side where it had whitespace there."""
    stripped = text.strip()
    if not stripped:
        return " " if text else ""
    said = stripped if not any(char.isalnum() for char in stripped) else phonemize(stripped)
    before = " " if text[0].isspace() else ""
    after = " " if text[-1].isspace() else ""
    return before + said + after


def is_phoneme_char(char: str) -> bool:
    return _BASE <= ord(char) <= 0xFFFFF
