"""Text preparation shared by every route and engine: language codes, sentence splitting, chunk caps.

Language codes are mapped here and nowhere else, so `en`, `en-US` and `English` mean the same on every route.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass

from errors import InvalidInput


@dataclass(frozen=True)
class Language:
    code: str
    """Canonical code, also the espeak-ng voice for espeak languages."""
    name: str
    g2p: str
    """Which grapheme-to-phoneme route speaks it: "espeak", "ja" or "zh"."""
    module: str = ""
    """Python module the G2P route needs beyond the base install ("" when none)."""
    package: str = ""
    """pip requirement that provides `module`."""

    def missing_package(self) -> str | None:
        """The pip requirement to install when this language's G2P is not importable, else None."""
        if self.module and importlib.util.find_spec(self.module) is None:
            return self.package
        return None


_LANGUAGES = (
    (Language("en-us", "American English", "espeak"), ("en", "en-us", "american english", "english", "a")),
    (Language("en-gb", "British English", "espeak"), ("en-gb", "en-uk", "british english", "b")),
    (Language("es", "Spanish", "espeak"), ("es", "es-es", "spanish", "español", "e")),
    (Language("fr-fr", "French", "espeak"), ("fr", "fr-fr", "french", "français", "f")),
    (Language("hi", "Hindi", "espeak"), ("hi", "hi-in", "hindi", "h")),
    (Language("it", "Italian", "espeak"), ("it", "it-it", "italian", "italiano", "i")),
    (Language("pt-br", "Brazilian Portuguese", "espeak"), ("pt", "pt-br", "portuguese", "português", "p")),
    (
        Language("ja", "Japanese", "ja", module="pyopenjtalk", package="pyopenjtalk-plus"),
        ("ja", "ja-jp", "jp", "japanese", "日本語", "j"),
    ),
    (
        Language("zh", "Mandarin Chinese", "zh", module="jieba", package="'misaki[zh]'"),
        ("zh", "zh-cn", "cmn", "chinese", "mandarin", "mandarin chinese", "中文", "z"),
    ),
)
LANGUAGES: dict[str, Language] = {alias: lang for lang, aliases in _LANGUAGES for alias in aliases}
DEFAULT_LANGUAGE = "en-us"


def resolve_language(code: str | None) -> Language:
    """Map any accepted spelling of a language (ISO code, locale, English name) onto one Language."""
    key = (code or DEFAULT_LANGUAGE).strip().lower().replace("_", "-")
    lang = LANGUAGES.get(key)
    if lang is None:
        accepted = sorted({lang.code for lang, _ in _LANGUAGES})
        raise InvalidInput(
            f"language {code!r} is not supported; use one of {', '.join(accepted)} (or its name, e.g. 'English')",
            code="unsupported_language",
        )
    missing = lang.missing_package()
    if missing:
        raise InvalidInput(
            f"{lang.name} needs its G2P package, which is not installed on this node: pip install {missing}",
            code="language_not_installed",
        )
    return lang


_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])|\n+")
# Each split keeps its separator on the left part, so joining parts with "" gives back the text exactly.
_CLAUSE_END = re.compile(r"(?<=[,;:、，；：—])(?!\s)|(?<=[,;:、，；：—]\s)")
_WORD_END = re.compile(r"(?<=\s)(?=\S)")


def normalize_text(text: str) -> str:
    """Collapse runs of spaces and tabs, keep line breaks as sentence boundaries."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(normalize_text(text)) if s and s.strip()]


def _split_long(piece: str, cap: int) -> list[str]:
    """Split one piece over `cap` at clause marks, then at spaces, then hard; each part at most `cap`."""
    if len(piece) <= cap:
        return [piece]
    for pattern in (_CLAUSE_END, _WORD_END):
        parts = [p for p in pattern.split(piece) if p]
        if len(parts) > 1:
            return _pack(parts, cap, cap)
    return [piece[i : i + cap] for i in range(0, len(piece), cap)]


def _pack(parts: list[str], first_cap: int, cap: int, max_parts: int = 0) -> list[str]:
    """Greedily concatenate parts into chunks: the first at most `first_cap` characters, the rest at most `cap`,
    and at most `max_parts` parts each (0: no limit)."""
    chunks: list[str] = []
    current = ""
    count = 0
    for part in parts:
        limit = first_cap if not chunks else cap
        if len((current + part).strip()) <= limit and (not max_parts or count < max_parts):
            current += part
            count += 1
            continue
        if current.strip():
            chunks.append(current.strip())
            limit = cap
        current, count = "", 1
        if len(part.strip()) <= limit:
            current = part
        else:
            pieces = _split_long(part.strip(), limit)
            chunks.extend(pieces[:-1])
            current = pieces[-1] + part[len(part.rstrip()) :]
    if current.strip():
        chunks.append(current.strip())
    return chunks


def chunk_text(text: str, first_chunk_chars: int, max_chunk_chars: int, max_sentences: int = 0) -> list[str]:
    """Split text into model-sized chunks along sentences; the first chunk is kept short for early audio.

    Whole sentences are packed together up to the caps; a sentence over the character cap is split at clause
    marks, then at word boundaries, then hard. The first chunk is at most `first_chunk_chars` characters and holds
    at most the first sentence; every other chunk is at most `max_chunk_chars` characters and `max_sentences`
    sentences. A cap of 0 means unlimited.
    """
    sentences = split_sentences(text)
    if not sentences:
        return []
    cap = max_chunk_chars or sys.maxsize
    first = _split_long(sentences[0], first_chunk_chars or cap)[0]
    remainder = sentences[0][len(first) :].strip()
    rest = [remainder, *sentences[1:]] if remainder else sentences[1:]
    return [first, *_pack([s + " " for s in rest], cap, cap, max_sentences)]
