"""A text as an engine will speak it, and where in the text as written each of its characters comes from.

Before a request is planned its text is rewritten into what is said: English numbers, money and dates read out as
words (text/normalize.py), runs of a script the voice's language cannot read skipped (text/scripts.py). Limits and
chunk caps count the spoken text, since saying it is the work; word timings name the words as written. A `Spoken`
keeps both, so that each chunk of the spoken text knows the written text it speaks.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from errors import PayloadTooLarge
from text.chunking import Chunk, chunk_text, collapse_whitespace

Edit = tuple[int, int, str]
"""`text[start:end]` is spoken as the string ("" or " ": not at all)."""

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, eq=False)
class Spoken:
    text: str
    """What is spoken, its whitespace normalized as `collapse_whitespace` does (line breaks end sentences, blank lines
    paragraphs)."""
    written: str
    """The text as written."""
    origin: Sequence[int] | None = None
    """For each character of `text`, the offset in `written` of the character it comes from (every character of a
    rewritten token's words comes from the token's first): never decreasing. None: `text` is `written`."""

    @classmethod
    def of(cls, written: str) -> Spoken:
        """A text spoken as it is written (its whitespace normalized)."""
        normalized = collapse_whitespace(written)
        return cls(written, written) if normalized == written else cls(written, written).edited(())

    def edited(self, edits: Iterable[Edit]) -> Spoken:
        """This text with each edit made (edits in order, none overlapping another; offsets into `text`), its
        whitespace normalized again."""
        origin = self.origin if self.origin is not None else range(len(self.text))
        pieces: list[str] = []
        where: list[int] = []
        pos = 0
        for start, end, spoken in edits:
            pieces += (self.text[pos:start], spoken)
            where += origin[pos:start]
            where += [origin[start] if start < len(origin) else len(self.written)] * len(spoken)
            pos = end
        pieces.append(self.text[pos:])
        where += origin[pos:]
        raw = "".join(pieces)
        text = collapse_whitespace(raw)
        if text == raw:
            return Spoken(text, self.written, None if text == self.written and self.origin is None else where)
        # collapse_whitespace changes whitespace only: the words of `text` are those of `raw`, in order.
        traced: list[int] = []
        for before, after in zip(_WORD.finditer(raw), _WORD.finditer(text), strict=True):
            traced += [where[before.start() - 1]] * (after.start() - len(traced))  # the space before the word
            traced += where[before.start() : before.end()]
        return Spoken(text, self.written, traced)

    def then(self, later: Spoken) -> Spoken:
        """`later` (a rewrite of this text as spoken: `later.written` is `self.text`) traced back to this text as
        written: lexicons and inline phonemes rewrite a text, the engine's normalization rewrites it again."""
        if later.origin is None and later.text == self.text:
            return self
        if self.origin is None:
            return Spoken(later.text, self.written, later.origin)
        inner = later.origin if later.origin is not None else range(len(later.text))
        end = len(self.written)
        origin = [self.origin[i] if i < len(self.origin) else end for i in inner]
        return Spoken(later.text, self.written, origin)

    def written_between(self, start: int, end: int) -> str:
        """The written text that `text[start:end]` speaks; a rewritten token belongs to the part its words begin in."""
        if self.origin is None:
            return self.text[start:end]
        return self.written[self._written_at(start) : self._written_at(end)]

    def _written_at(self, index: int) -> int:
        """Where in `written` the text from `text[index]` on begins: past a rewritten token begun before `index`."""
        assert self.origin is not None
        if 0 < index < len(self.origin) and self.origin[index] == self.origin[index - 1]:
            index = bisect.bisect_right(self.origin, self.origin[index - 1])
        return self.origin[index] if index < len(self.origin) else len(self.written)

    def chunks(self, first_chunk_chars: int, max_chunk_chars: int, max_sentences: int = 0) -> list[Chunk]:
        """`chunk_text`'s chunks of the spoken text (its caps count spoken characters), each with the written text it
        speaks where that differs."""
        written = None if self.origin is None else self.written_between
        return chunk_text(self.text, first_chunk_chars, max_chunk_chars, max_sentences, written=written)


def check_spoken_length(written_chars: int, spoken_chars: int, limit: int, what: str = "text") -> None:
    """PayloadTooLarge (`spoken_too_long`) when text is longer as spoken than POLYTTS_MAX_SPOKEN_CHARS allows."""
    if spoken_chars > limit:
        raise PayloadTooLarge(
            f"{what} is {written_chars} characters as written and {spoken_chars} as spoken (numbers, money and "
            f"dates read out as words); the limit is {limit} spoken characters (POLYTTS_MAX_SPOKEN_CHARS)",
            code="spoken_too_long",
            detail={"limit": limit, "written_chars": written_chars, "spoken_chars": spoken_chars},
        )
