"""Language codes: every accepted spelling of a language mapped onto one `Language`, here and nowhere else.

So `en`, `en-US` and `English` mean the same on every route; the same table says which language a Kokoro voice name
speaks (`af_heart` American English) and which G2P package a language needs.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from typing import Literal

from errors import InvalidInput


@dataclass(frozen=True)
class Language:
    code: str
    """Canonical code, also the espeak-ng voice for espeak languages."""
    name: str
    g2p: str
    """Which grapheme-to-phoneme route speaks it: "espeak", "ja" or "zh"."""
    module: str = ""
    """Python module the G2P route needs beyond espeak-ng ("" when none). requirements.txt installs every one; a node
    set up without it refuses the language with a 422 that names `package`."""
    package: str = ""
    """pip requirement that provides `module`."""
    kokoro_prefix: str = ""
    """First letter of Kokoro's voice names in this language (`a` in `af_heart`); also Kokoro's lang_code."""
    scripts: frozenset[str] = frozenset({"Latin"})
    """The scripts its G2P reads (text/scripts.py names them); letters of any other are skipped, not spelled out."""

    def missing_package(self) -> str | None:
        """The pip requirement to install when this language's G2P is not importable, else None."""
        if self.module and importlib.util.find_spec(self.module) is None:
            return self.package
        return None


_LANGUAGES = (
    (
        Language("en-us", "American English", "espeak", kokoro_prefix="a"),
        ("en", "en-us", "american english", "english"),
    ),
    (Language("en-gb", "British English", "espeak", kokoro_prefix="b"), ("en-gb", "en-uk", "british english")),
    (Language("es", "Spanish", "espeak", kokoro_prefix="e"), ("es", "es-es", "spanish", "español")),
    (Language("fr-fr", "French", "espeak", kokoro_prefix="f"), ("fr", "fr-fr", "french", "français")),
    (
        Language("hi", "Hindi", "espeak", kokoro_prefix="h", scripts=frozenset({"Devanagari", "Latin"})),
        ("hi", "hi-in", "hindi"),
    ),
    (Language("it", "Italian", "espeak", kokoro_prefix="i"), ("it", "it-it", "italian", "italiano")),
    (
        Language("pt-br", "Brazilian Portuguese", "espeak", kokoro_prefix="p"),
        ("pt", "pt-br", "portuguese", "português"),
    ),
    (
        Language(
            "ja",
            "Japanese",
            "ja",
            module="pyopenjtalk",
            package="pyopenjtalk-plus",
            kokoro_prefix="j",
            scripts=frozenset({"Hiragana", "Katakana", "Kana", "Han", "Latin"}),
        ),
        ("ja", "ja-jp", "jp", "japanese", "日本語"),
    ),
    (
        Language(
            "zh",
            "Mandarin Chinese",
            "zh",
            module="jieba",
            package="'misaki[zh]'",
            kokoro_prefix="z",
            scripts=frozenset({"Han", "Bopomofo", "Latin"}),
        ),
        ("zh", "zh-cn", "cmn", "chinese", "mandarin", "mandarin chinese", "中文"),
    ),
)
# Kokoro's one-letter lang codes are accepted as language codes too.
LANGUAGES: dict[str, Language] = {
    alias: lang for lang, aliases in _LANGUAGES for alias in (*aliases, lang.kokoro_prefix)
}
DEFAULT_LANGUAGE = "en-us"
_KOKORO_PREFIXES = {lang.kokoro_prefix: lang for lang, _ in _LANGUAGES}
Gender = Literal["female", "male"]
_KOKORO_GENDERS: dict[str, Gender] = {"f": "female", "m": "male"}
_KOKORO_VOICE_NAME = re.compile(r"([a-z])([fm])_\w+")


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


def voice_language(name: str) -> Language | None:
    """The language a Kokoro voice name speaks, from its first letter (`bf_emma` British English); None when the
    name does not follow Kokoro's `<language><gender>_<name>` pattern or the letter is not a known language."""
    match = _KOKORO_VOICE_NAME.fullmatch(name)
    return _KOKORO_PREFIXES.get(match.group(1)) if match else None


def voice_gender(name: str) -> Gender | None:
    """The gender of a Kokoro voice from its second letter (`af_heart` female, `am_adam` male), else None."""
    match = _KOKORO_VOICE_NAME.fullmatch(name)
    return _KOKORO_GENDERS[match.group(2)] if match and match.group(1) in _KOKORO_PREFIXES else None
