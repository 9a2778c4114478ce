"""What the lifecycle reads of a speech request: who speaks and how, and its text when it is given whole.

The web layer's request models are these; a family's generation parameters (`ENGINE_PARAMS`) are read from a request
as attributes of the same names, None where not given.
"""

from __future__ import annotations

from typing import Protocol

from engines import ENGINE_SPECS

ENGINE_PARAMS = frozenset(name for spec in ENGINE_SPECS for name in spec.params.model_fields)
"""Request fields that are generation parameters of some engine family; another family's is a 422."""


class VoiceRequest(Protocol):
    """Who speaks and how: what every speech request gives besides its text (the web layer's request models), and
    any family's generation parameters (ENGINE_PARAMS) as attributes, None where not given."""

    @property
    def voice_id(self) -> str | None: ...

    @property
    def language(self) -> str | None: ...


class SpeechRequest(VoiceRequest, Protocol):
    """A request whose text is given whole, with its own caps per generation (None: the engine's)."""

    @property
    def text(self) -> str: ...

    @property
    def max_chars_per_gen(self) -> int | None: ...

    @property
    def max_sentences_per_gen(self) -> int | None: ...
