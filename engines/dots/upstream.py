"""Import the `dots_tts` package (dots.tts 0.3.1, installed without its declared dependencies) as the service runs it.

- torchaudio: dots.tts resamples and takes filterbanks with it on every cloning path, but no torchaudio release
  installs beside the torch pinned here (engines/torchaudio_ops.py says why); where it does not import, the
  ported operations stand in for it, in the modules dots.tts imports them from, and anything else of torchaudio
  raises saying so.
- lingua and WeTextProcessing (`tn`): imported at the top of `dots_tts.utils.text`, used only to guess the language
  of a text and to normalize it, neither of which the service asks for (it names the language, and normalizes text
  itself); stand-ins take their names, and using one raises.
- loguru: dots.tts logs every request through loguru to stderr, outside the service's log; its records are turned
  off, and the engine logs what matters through `logging`.
"""

from __future__ import annotations

import functools
import importlib
import types

from engines.import_stubs import stub_if_missing
from engines.torchaudio_ops import Resample, fbank, resample

_PORTED: dict[str, dict[str, object]] = {
    "torchaudio.functional": {"resample": resample},
    "torchaudio.transforms": {"Resample": Resample},
    "torchaudio.compliance.kaldi": {"fbank": fbank},
}
"""Where dots.tts imports each torchaudio operation from, and the port that stands in for it."""

_UNUSED = {
    "lingua": ("Language", "LanguageDetectorBuilder"),
    "tn.chinese.normalizer": ("Normalizer",),
    "tn.english.normalizer": ("Normalizer",),
}
_UNUSED_WHY = "dots.tts uses it only to detect a text's language or normalize it, which the service does not ask for"


class Unavailable:
    """A name imported from a stand-in module: importable, but calling or using it raises a RuntimeError saying
    why."""

    def __init__(self, name: str, why: str) -> None:
        self._name = name
        self._why = why

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError(f"{self._name} is not installed; {self._why}")

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise RuntimeError(f"{self._name} is not installed; {self._why}: {attribute}")


def import_dots_tts() -> types.ModuleType:
    """Import and return `dots_tts.runtime_double_streaming` (its `DotsTtsRuntimeDoubleStreaming` is the package's
    `DotsTtsRuntime` with the double-streaming session added), with the stand-ins above where their modules are
    missing."""
    _stand_ins_once()
    return importlib.import_module("dots_tts.runtime_double_streaming")


@functools.cache
def _stand_ins_once() -> None:
    for module, ported in _PORTED.items():
        stub_if_missing(module, "dots.tts needs only its resampling and Kaldi filterbanks, ported in its place", ported)
    for module, names in _UNUSED.items():
        stub_if_missing(module, _UNUSED_WHY, {name: Unavailable(f"{module}.{name}", _UNUSED_WHY) for name in names})
    from loguru import logger

    logger.disable("dots_tts")
