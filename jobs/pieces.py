"""What a job is made of: its chapters cut into pieces, each piece the text of one speech request with the job's
options (`PieceRequest`, what the lifecycle's `SpeechRequest` reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs.store import Piece
from lifecycle.requests import ENGINE_PARAMS
from text.chunking import chunk_text, is_speakable


@dataclass(frozen=True)
class JobSpec:
    """A job as asked for: its chapters (title, text), its format and the speech options of every piece."""

    chapters: list[tuple[str, str]]
    format: str
    voice_id: str | None = None
    language: str | None = None
    max_chars_per_gen: int | None = None
    max_sentences_per_gen: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    """The engine parameters given (the others take the engine's defaults)."""
    webhook_url: str | None = None

    @property
    def chars(self) -> int:
        return sum(len(text) for _, text in self.chapters)

    def options(self) -> dict[str, Any]:
        """The speech options, as the job table keeps them."""
        return {
            "voice_id": self.voice_id,
            "language": self.language,
            "max_chars_per_gen": self.max_chars_per_gen,
            "max_sentences_per_gen": self.max_sentences_per_gen,
            "params": self.params,
        }


@dataclass(frozen=True)
class PieceRequest:
    """One piece as a speech request: the job's options and the piece's text (a `lifecycle.requests.SpeechRequest`;
    the engine parameters are read as attributes, None where not given)."""

    text: str
    voice_id: str | None = None
    language: str | None = None
    max_chars_per_gen: int | None = None
    max_sentences_per_gen: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, options: dict[str, Any], text: str) -> PieceRequest:
        return cls(text=text, **options)

    def __getattr__(self, name: str) -> Any:
        if name in ENGINE_PARAMS:
            return self.params.get(name)
        raise AttributeError(name)


def cut(chapters: list[tuple[str, str]], piece_chars: int) -> list[Piece]:
    """Each chapter's text cut into pieces of at most `piece_chars` characters, at sentence ends where it can be
    (`chunk_text`); pieces with nothing to speak (a line of asterisks between scenes) are left out. The cut depends
    on the text alone: a job cut again after a restart has the same pieces."""
    pieces: list[Piece] = []
    for chapter, (_, text) in enumerate(chapters):
        for chunk in chunk_text(text, piece_chars, piece_chars):
            if is_speakable(chunk.text):
                pieces.append(Piece(len(pieces), chapter, chunk.text))
    return pieces
